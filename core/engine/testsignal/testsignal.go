// Package testsignal lets a test wait for a service to act instead of
// polling for the effect (River's TestSignals). A service holds Signal
// fields and calls Signal at the points tests care about; production never
// calls Init, so every Signal is a no-op there.
package testsignal

import (
	"fmt"
	"time"
)

// DefaultTimeout bounds WaitOrTimeout.
const DefaultTimeout = 5 * time.Second

// buffer is how many unread signals an initialised Signal holds before a
// further one is dropped (a test that never reads must not block a service).
const buffer = 1000

// Signal carries values of T from a service to a waiting test.
type Signal[T any] struct {
	ch chan T
}

// Init arms the signal; only tests call it.
func (s *Signal[T]) Init() { s.ch = make(chan T, buffer) }

// Signal records v for a test, never blocking; a no-op until Init.
func (s *Signal[T]) Signal(v T) {
	if s == nil || s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// TB is the part of testing.TB WaitOrTimeout needs.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// WaitOrTimeout returns the next value, failing t after DefaultTimeout.
func (s *Signal[T]) WaitOrTimeout(t TB) T {
	t.Helper()
	v, ok := s.WaitFor(DefaultTimeout)
	if !ok {
		var zero T
		t.Fatalf("testsignal: no %T signal within %s", zero, DefaultTimeout)
	}
	return v
}

// WaitFor returns the next value, or false after d.
func (s *Signal[T]) WaitFor(d time.Duration) (T, bool) {
	if s.ch == nil {
		panic(fmt.Sprintf("testsignal: wait on a %T signal that was never initialised", *new(T)))
	}
	select {
	case v := <-s.ch:
		return v, true
	case <-time.After(d):
		var zero T
		return zero, false
	}
}

// Pending reports whether a value is waiting, without consuming it.
func (s *Signal[T]) Pending() int { return len(s.ch) }
