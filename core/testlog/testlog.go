// Package testlog routes a service's log lines to its test's log. A server
// goroutine can outlive the test that started it (an HTTP/2 stream's handler
// still returning after the test's server closed), and t.Log from it after
// the test ended panics, or races with the test's end: lines written after
// the test ended are dropped instead.
package testlog

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
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

// Buffer keeps what a logger writes, for a test to read while the writers
// (a server's goroutines) still run.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Lines is what was written so far, line by line.
func (b *Buffer) Lines() []string { return strings.Split(strings.TrimSpace(b.String()), "\n") }

// Count is the number of times s was written so far, anywhere in a line:
// a message that contains s counts too (CountMessage does not).
func (b *Buffer) Count(s string) int { return strings.Count(b.String(), s) }

// CountMessage is the number of lines written so far whose message (a
// zerolog JSON line's "message" field) is msg exactly. A line whose message
// only contains msg is not one: "claim failed; retried quietly until it
// claims again" is no "pair claims again", though Count("claims again")
// finds it.
func (b *Buffer) CountMessage(msg string) int {
	n := 0
	for _, l := range b.Lines() {
		var line struct {
			Message string `json:"message"`
		}
		if json.Unmarshal([]byte(l), &line) == nil && line.Message == msg {
			n++
		}
	}
	return n
}
