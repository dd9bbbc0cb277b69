package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// stopContext returns a context that ends on the first SIGINT or SIGTERM
// (or when parent ends), cancelling the builds in flight, and stop, which
// releases the signals. A second signal, while the first one's cancellation
// is still being worked through, says so on stderr and exits at once with
// 128 + the signal's number, as a process the signal killed would: an
// operator's second Ctrl+C is never swallowed by a long build.
// signal.NotifyContext kept catching every later signal until stop.
//
// It is core/shutdown.Context without the force step: this module is
// separate from the main one, and importing that package would put the
// main module's requirements into this module's build list, moving the
// tools' pins.
func stopContext(parent context.Context, name string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			fmt.Fprintf(os.Stderr, "%s: second signal (%s): exiting now\n", name, s)
			code := 1
			if n, ok := s.(syscall.Signal); ok {
				code = 128 + int(n)
			}
			os.Exit(code)
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
		})
		cancel()
	}
}
