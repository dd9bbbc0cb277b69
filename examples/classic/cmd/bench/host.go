package main

import (
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// hostSpeed is how fast this host makes what the stack's CPU per leaf goes
// to besides its own code: a system call (getppid, about the cheapest) and
// a loopback TCP round trip between two goroutines (two writes, two reads,
// two wake-ups through the network poller). Machines of the same kind
// differ in both by 2× and more from day to day (a VM's system calls cost
// what its hypervisor makes them cost), and converge's and Postgres' CPU per
// leaf follow them, so the line carries them (host_syscall_us,
// host_rtt_us): runs on different days can be compared. Each is the best
// of five batches, measured before the stack starts.
type hostSpeed struct{ syscallUS, rttUS float64 }

func measureHost() (hostSpeed, error) {
	var h hostSpeed
	h.syscallUS, _ = bestOf(5, 50_000, func() error {
		syscall.Getppid()
		return nil
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return h, fmt.Errorf("host speed: %w", err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // an echo until the client closes
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return h, fmt.Errorf("host speed: %w", err)
	}
	defer c.Close()
	var buf [16]byte
	h.rttUS, err = bestOf(5, 2_000, func() error {
		if _, err := c.Write(buf[:]); err != nil {
			return err
		}
		_, err := io.ReadFull(c, buf[:])
		return err
	})
	if err != nil {
		return h, fmt.Errorf("host speed: loopback round trip: %w", err)
	}
	return h, nil
}

// bestOf runs op n times in each of its batches and returns the
// fastest batch's µs per op.
func bestOf(batches, n int, op func() error) (float64, error) {
	best := time.Duration(1<<63 - 1)
	for range batches {
		start := time.Now()
		for range n {
			if err := op(); err != nil {
				return 0, err
			}
		}
		best = min(best, time.Since(start))
	}
	return float64(best.Nanoseconds()) / float64(n) / 1000, nil
}
