// Package testsignal lets a test wait for a service to act instead of
// polling for the effect (River's TestSignals). A service holds a struct of
// Signal fields and calls Signal at the points a test cares about; a test
// calls Init before starting the service and WaitOrTimeout to block until the
// service got there. An uninitialised Signal (production) is a no-op.
package testsignal

import (
	"time"
)

// Timeout is how long WaitOrTimeout waits before failing the test.
const Timeout = 10 * time.Second

// capacity bounds how many unconsumed signals a test can leave pending; a
// service that signals into a full buffer fails loudly instead of blocking.
const capacity = 1000

// TB is the part of testing.TB a signal uses (kept narrow so this package
// does not import testing into production binaries).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Signal is one point a service reports reaching, carrying a value.
type Signal[T any] struct {
	ch chan T
}

// Init arms the signal; call it before the service starts.
func (s *Signal[T]) Init() { s.ch = make(chan T, capacity) }

// Signal records that the service reached the point. A no-op unless Init
// was called. It never blocks: a test that lets capacity signals pile up
// unconsumed panics the service, which is a bug in the test.
func (s *Signal[T]) Signal(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		panic("testsignal: buffer full; the test does not consume this signal")
	}
}

// WaitOrTimeout returns the next signalled value, failing tb after Timeout.
func (s *Signal[T]) WaitOrTimeout(tb TB) T {
	tb.Helper()
	if s.ch == nil {
		tb.Fatalf("testsignal: WaitOrTimeout on a signal that was never Init")
	}
	select {
	case v := <-s.ch:
		return v
	case <-time.After(Timeout):
		tb.Fatalf("testsignal: timed out after %s waiting for a signal", Timeout)
	}
	var zero T
	return zero
}

// RequireEmpty fails tb if a signal is pending.
func (s *Signal[T]) RequireEmpty(tb TB) {
	tb.Helper()
	select {
	case v := <-s.ch:
		tb.Fatalf("testsignal: unexpected signal %v", v)
	default:
	}
}
