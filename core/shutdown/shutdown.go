// Package shutdown is how a process hears it should stop: the first SIGINT
// or SIGTERM asks for a graceful shutdown (the context ends, the process
// drains), and a second one ends the process at once, for an operator who
// will not wait out a drain (a Ctrl+C pressed twice).
package shutdown

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// Context returns a context that ends on the first SIGINT or SIGTERM (or
// when parent ends) and stop, which releases the signals. A second signal
// calls force (when not nil: what must not outlive the process, such as
// children to kill), says so on stderr as name and exits with 128 + the
// signal's number, as a process the signal killed would.
func Context(parent context.Context, name string, force func()) (context.Context, context.CancelFunc) {
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
			fmt.Fprintf(os.Stderr, "%s: second signal (%s): exiting now, without finishing the shutdown\n", name, s)
			if force != nil {
				force()
			}
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
