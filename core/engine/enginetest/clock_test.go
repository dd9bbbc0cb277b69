package enginetest

import (
	"testing"
	"time"

	"github.com/converge-run/converge/core/engine"
)

var _ engine.Clock = (*Clock)(nil)

func TestClock_FiresWaitersOnAdvance(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(start)
	a := c.After(time.Second)
	b := c.After(time.Minute)
	if !c.WaitForWaiters(2, time.Second) {
		t.Fatal("two waiters not registered")
	}
	c.Advance(time.Second)
	select {
	case got := <-a:
		if !got.Equal(start.Add(time.Second)) {
			t.Fatalf("fired at %v", got)
		}
	default:
		t.Fatal("a did not fire at its deadline")
	}
	select {
	case <-b:
		t.Fatal("b fired early")
	default:
	}
	if c.Waiters() != 1 {
		t.Fatalf("waiters = %d, want 1", c.Waiters())
	}
	select {
	case <-c.After(0):
	default:
		t.Fatal("After(0) must fire at once")
	}
}
