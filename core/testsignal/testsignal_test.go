package testsignal

import (
	"fmt"
	"testing"
)

type fakeTB struct{ failed string }

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = fmt.Sprintf(format, args...)
}

func TestSignal(t *testing.T) {
	t.Parallel()
	t.Run("NoOpUntilInit", func(t *testing.T) {
		t.Parallel()
		var s Signal[int]
		s.Signal(1) // must not block or panic
	})
	t.Run("DeliversInOrder", func(t *testing.T) {
		t.Parallel()
		var s Signal[int]
		s.Init()
		s.Signal(1)
		s.Signal(2)
		if got := s.WaitOrTimeout(t); got != 1 {
			t.Fatalf("got %d, want 1", got)
		}
		if got := s.WaitOrTimeout(t); got != 2 {
			t.Fatalf("got %d, want 2", got)
		}
		s.RequireEmpty(t)
	})
	t.Run("RequireEmptyFailsOnPending", func(t *testing.T) {
		t.Parallel()
		var s Signal[string]
		s.Init()
		s.Signal("x")
		tb := &fakeTB{}
		s.RequireEmpty(tb)
		if tb.failed == "" {
			t.Fatal("RequireEmpty passed with a pending signal")
		}
	})
}

func TestLatest(t *testing.T) {
	t.Parallel()
	t.Run("NoOpUntilInit", func(t *testing.T) {
		t.Parallel()
		var l Latest[int]
		l.Record(func() int { t.Fatal("built a value nobody reads"); return 0 })
		if _, ok := l.Load(); ok {
			t.Fatal("a value recorded before Init")
		}
	})
	t.Run("KeepsTheNewest", func(t *testing.T) {
		t.Parallel()
		var l Latest[int]
		l.Init()
		if _, ok := l.Load(); ok {
			t.Fatal("a value before any was recorded")
		}
		l.Record(func() int { return 1 })
		l.Record(func() int { return 2 })
		if got, ok := l.Load(); !ok || got != 2 {
			t.Fatalf("got %d (%v), want 2", got, ok)
		}
	})
}
