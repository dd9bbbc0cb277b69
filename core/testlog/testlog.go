// Package testlog routes a service's log lines to its test's log. A server
// goroutine can outlive the test that started it (an HTTP/2 stream's handler
// still returning after the test's server closed), and t.Log from it after
// the test ended panics, or races with the test's end: lines written after
// the test ended are dropped instead.
package testlog

import (
	"bytes"
	"io"
	"sync"
	"testing"
)

// Writer writes each line to t.Log until t's cleanups run, and drops it
// after. Call it before starting what logs to it: its cleanup then runs
// after theirs, so their last lines still show.
func Writer(t testing.TB) io.Writer {
	w := &writer{t: t}
	t.Cleanup(w.close)
	return w
}

type writer struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(string(bytes.TrimRight(p, "\n")))
	}
	return len(p), nil
}

func (w *writer) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
}
