// Package testsignal lets a test wait for a service to act instead of
// polling for the effect (River's TestSignals). A service holds a struct of
// Signal fields and calls Signal at the points a test cares about; a test
// calls Init before starting the service and WaitOrTimeout to block until the
// service got there. An uninitialised Signal (production) is a no-op.
package testsignal

import (
	"fmt"
	"sync"
	"time"
)

// Timeout is how long WaitOrTimeout waits before failing the test.
const Timeout = 10 * time.Second

// capacity bounds how many unconsumed signals an initialised Signal holds;
// past it further signals are dropped, so a test that reads only some of
// them can never block or crash the service it observes.
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
// was called; it never blocks.
func (s *Signal[T]) Signal(v T) {
	if s == nil || s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

// WaitOrTimeout returns the next signalled value, failing tb after Timeout.
func (s *Signal[T]) WaitOrTimeout(tb TB) T {
	tb.Helper()
	v, ok := s.WaitFor(Timeout)
	if !ok {
		tb.Fatalf("testsignal: no %T signal within %s", v, Timeout)
	}
	return v
}

// WaitFor returns the next signalled value, or false after d.
func (s *Signal[T]) WaitFor(d time.Duration) (T, bool) {
	if s.ch == nil {
		panic(fmt.Sprintf("testsignal: wait on a %T signal that was never Init", *new(T)))
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-s.ch:
		return v, true
	case <-t.C:
		var zero T
		return zero, false
	}
}

// Pending is how many signalled values wait unread.
func (s *Signal[T]) Pending() int { return len(s.ch) }

// RequireEmpty fails tb if a signal is pending.
func (s *Signal[T]) RequireEmpty(tb TB) {
	tb.Helper()
	select {
	case v := <-s.ch:
		tb.Fatalf("testsignal: unexpected signal %v", v)
	default:
	}
}

// Latest keeps the newest value a service reported at a point, for a test's
// failure message to say what the service was doing when a wait ran out.
// Unlike a Signal it holds one value, replaced at each report, and nobody
// waits on it. An uninitialised Latest (production) is a no-op that never
// calls the function it is handed, so a service may build an expensive
// value in it.
type Latest[T any] struct {
	on  bool
	mu  sync.Mutex
	v   T
	set bool
}

// Init arms the value; call it before the service starts.
func (l *Latest[T]) Init() { l.on = true }

// Record stores f's value; f runs only once Init was called.
func (l *Latest[T]) Record(f func() T) {
	if l == nil || !l.on {
		return
	}
	v := f()
	l.mu.Lock()
	l.v, l.set = v, true
	l.mu.Unlock()
}

// Load returns the newest value recorded (false: none yet).
func (l *Latest[T]) Load() (T, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.v, l.set
}
