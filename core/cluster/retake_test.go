package cluster_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/engine/enginetest"
)

// lockSessionFns is a held liveness lock whose Ping the test decides.
type lockSessionFns struct{ ping func() error }

func (s lockSessionFns) Ping(context.Context, time.Duration) error { return s.ping() }
func (lockSessionFns) Close()                                      {}

// longestWait records the longest wait a loop asked its clock for.
type longestWait struct {
	*enginetest.Clock
	mu      sync.Mutex
	longest time.Duration
}

func (c *longestWait) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	c.longest = max(c.longest, d)
	c.mu.Unlock()
	return c.Clock.After(d)
}

// A member whose lock a database restart ended takes it again within about
// one lock check of the database's return: while the lock is lost it is
// retried at the check's cadence (Every, ±25 %), never on a backoff that
// grows past it. The member claims nothing until then, so a 1 s backoff
// overshot a 2–4 s restart by up to 1.25 s (the chaos suite's fast restart:
// locks re-taken 0.8–2.4 s after Postgres was back).
func TestLivenessLock_RetakesWithinACheckOfTheDatabasesReturn(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := &longestWait{Clock: enginetest.NewClock(t0)}
	back := t0.Add(4 * time.Second) // the restart's end
	var retakenAt time.Time
	var mu sync.Mutex
	refused := errors.New("dial tcp: connect: connection refused")
	l := &cluster.LivenessLock{Clock: clock, Log: zerolog.Nop(),
		Acquire: func(context.Context, int32) (cluster.LockSession, error) {
			if clock.Now().Before(back) {
				return nil, refused
			}
			mu.Lock()
			retakenAt = clock.Now()
			mu.Unlock()
			return lockSessionFns{ping: func() error { return nil }}, nil
		}}
	l.TestSignals.Init()
	// The first session is the one the restart ends.
	first := l.Acquire
	l.Acquire = func(context.Context, int32) (cluster.LockSession, error) {
		return lockSessionFns{ping: func() error { return refused }}, nil
	}
	require.NoError(t, l.Take(t.Context()))
	l.Acquire = first

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = l.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	// Time moves only while the lock's loop waits on it, 5 ms at a time.
	const step = 5 * time.Millisecond
	go func() {
		for ctx.Err() == nil {
			if clock.WaitForWaiters(1, time.Second) {
				clock.Advance(step)
			}
		}
	}()
	require.False(t, l.TestSignals.Held.WaitOrTimeout(t), "the restart ends the session")
	require.True(t, l.TestSignals.Held.WaitOrTimeout(t), "the lock is taken again once the database is back")
	mu.Lock()
	late := retakenAt.Sub(back)
	mu.Unlock()
	every := cluster.DefaultLockCheckEvery
	clock.mu.Lock()
	longest := clock.longest
	clock.mu.Unlock()
	require.LessOrEqual(t, longest, every*5/4, "no wait past one check (±25 percent) while the lock is lost")
	require.LessOrEqual(t, late, every*5/4+step, "re-taken within a check of the database's return, not %s after it", late)
}
