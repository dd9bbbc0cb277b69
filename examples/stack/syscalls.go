package stack

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
)

// IOCalls counts the I/O system calls a process (all its threads) has made
// since it started: syscr and syscw of /proc/<pid>/io, the read-class
// (read, readv, pread…) and write-class (write, writev, pwrite…) calls,
// sockets and pipes included. Go's network reads and writes are such calls,
// so over a run these count the messages a process sent and the reads it
// took to receive them. Take one before and one after a measured phase and
// subtract (IOCalls.Sub).
type IOCalls struct {
	Reads, Writes int64
}

// Sub is the calls made between the earlier sample o and c.
func (c IOCalls) Sub(o IOCalls) IOCalls {
	return IOCalls{Reads: c.Reads - o.Reads, Writes: c.Writes - o.Writes}
}

// ProcessIOCalls reads pid's I/O system call counts.
func ProcessIOCalls(pid int) (IOCalls, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return IOCalls{}, fmt.Errorf("i/o calls of pid %d: %w", pid, err)
	}
	return parseProcIO(pid, b)
}

func parseProcIO(pid int, b []byte) (IOCalls, error) {
	var c IOCalls
	var seen [2]bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok {
			continue
		}
		var dst *int64
		switch string(key) {
		case "syscr":
			dst, seen[0] = &c.Reads, true
		case "syscw":
			dst, seen[1] = &c.Writes, true
		default:
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(val)), 10, 64)
		if err != nil {
			return IOCalls{}, fmt.Errorf("parse /proc/%d/io: %s: %w", pid, key, err)
		}
		*dst = n
	}
	if !seen[0] || !seen[1] {
		return IOCalls{}, fmt.Errorf("parse /proc/%d/io: no syscr/syscw", pid)
	}
	return c, nil
}

// IOCalls samples converge's and the worker's I/O system call counts.
func (s *Stack) IOCalls() (converge, worker IOCalls, err error) {
	var errs [2]error
	converge, errs[0] = ProcessIOCalls(s.converge.Pid())
	worker, errs[1] = ProcessIOCalls(s.worker.Pid())
	return converge, worker, errors.Join(errs[:]...)
}
