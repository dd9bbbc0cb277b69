package engine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/engine/enginetest"
	"github.com/converge-run/converge/core/testlog"
)

func TestEngine_OneFailingDutyStopsTheOthers(t *testing.T) {
	t.Parallel()
	stopped := make(chan struct{})
	e := engine.New(zerolog.Nop(),
		engine.Func{N: "waits", F: func(ctx context.Context) error { <-ctx.Done(); close(stopped); return nil }},
		engine.Func{N: "fails", F: func(context.Context) error { return errors.New("boom") }},
	)
	err := e.Run(context.Background())
	require.ErrorContains(t, err, "duty fails: boom")
	<-stopped
}

// OnFatal's f runs once, with the first fatal error, before the other
// duties are cancelled: the process's shutdown can begin while they drain.
func TestEngine_OnFatalRunsOnceBeforeTheOthersStop(t *testing.T) {
	t.Parallel()
	var stopping atomic.Bool
	var calls atomic.Int32
	var got error
	fails := engine.Func{N: "fails", F: func(context.Context) error { return errors.New("boom") }}
	e := engine.New(zerolog.Nop(),
		engine.Func{N: "waits", F: func(ctx context.Context) error {
			<-ctx.Done()
			require.True(t, stopping.Load(), "f ran before the others were cancelled")
			return nil
		}},
		fails, fails,
	)
	e.OnFatal(func(err error) { got = err; calls.Add(1); stopping.Store(true) })
	err := e.Run(context.Background())
	require.ErrorContains(t, err, "duty fails: boom")
	require.EqualValues(t, 1, calls.Load())
	require.Equal(t, err, got)
}

func TestEngine_CancelStopsEveryDutyCleanly(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	d := engine.Func{N: "d", F: func(ctx context.Context) error { <-ctx.Done(); n.Add(1); return ctx.Err() }}
	e := engine.New(zerolog.Nop(), d, d, d)
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	cancel()
	require.NoError(t, <-done, "context.Canceled from a duty is a clean stop")
	require.EqualValues(t, 3, n.Load())
}

func TestPollLoop_RunsAgainWhileBusyAndWakesOnHint(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake := make(chan struct{}, 1)
	var calls atomic.Int32
	steps := make(chan int32, 100)
	loop := &engine.PollLoop{
		Name: "t",
		Step: func(context.Context) (bool, error) {
			c := calls.Add(1)
			steps <- c
			return c < 5, nil // busy for the first four steps
		},
		Wake: wake,
		Min:  time.Hour, // an idle loop would wait forever without a wake
		Max:  time.Hour,
	}
	go func() { _ = loop.Run(ctx) }()
	for i := int32(1); i <= 5; i++ {
		require.Equal(t, i, <-steps, "busy steps run back to back")
	}
	select {
	case c := <-steps:
		t.Fatalf("idle loop ran step %d without a wake", c)
	case <-time.After(50 * time.Millisecond):
	}
	wake <- struct{}{}
	select {
	case c := <-steps:
		require.Equal(t, int32(6), c, "a wake runs the step at once")
	case <-time.After(5 * time.Second):
		t.Fatal("wake ignored")
	}
}

// A step that fails waits its backoff out, wakes or not: the drainer's
// wake is every broker's outbox_ready, and a failing drain that ran again
// on each one retried (and logged an ERROR) at the rate results arrived.
func TestPollLoop_AFailingStepWaitsItsBackoffThroughWakes(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := enginetest.NewClock(time.Unix(0, 0))
	wake := make(chan struct{})
	close(wake) // a wake always pending
	steps := make(chan time.Time, 100)
	loop := &engine.PollLoop{
		Name: "t",
		Step: func(context.Context) (bool, error) {
			select {
			case steps <- clock.Now():
			default: // a spinning loop must not block here
			}
			return false, errors.New("statement failed")
		},
		Wake: wake, Min: time.Millisecond, Max: time.Hour, Clock: clock, Log: zerolog.Nop(),
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = loop.Run(ctx) }()
	defer func() { cancel(); <-done }()

	first := <-steps
	require.True(t, clock.WaitForWaiters(1, 10*time.Second), "the loop waits for its backoff")
	clock.Advance(2 * time.Second) // past the backoff's cap (1 s, +25 % jitter)
	select {
	case at := <-steps:
		require.True(t, at.After(first), "the retry ran before the clock moved: a wake cut the backoff short")
	case <-time.After(10 * time.Second):
		t.Fatal("no retry after the backoff")
	}
}

// A step that keeps failing with an error of its own (not the database
// unreachable, which the outage reporter logs once) is logged when the
// failures begin and once more when a step succeeds again, not on every
// retry: a drain lane that kept failing wrote an ERROR a second for as long
// as it failed.
func TestPollLoop_AFailingStepIsLoggedOnceUntilItSucceeds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clock := enginetest.NewClock(time.Unix(0, 0))
	var logs testlog.Buffer
	var calls atomic.Int32
	steps := make(chan int32, 100)
	loop := &engine.PollLoop{
		Name: "t",
		Step: func(context.Context) (bool, error) {
			c := calls.Add(1)
			steps <- c
			if c <= 5 {
				return false, errors.New("statement failed")
			}
			return false, nil
		},
		Min: time.Millisecond, Max: time.Hour, Clock: clock, Log: zerolog.New(&logs),
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = loop.Run(ctx) }()
	defer func() { cancel(); <-done }()

	for range 6 {
		<-steps
		require.True(t, clock.WaitForWaiters(1, 10*time.Second), "the loop waits")
		clock.Advance(2 * time.Second) // past any backoff (1 s cap, +25 % jitter)
	}
	require.Equal(t, 1, logs.Count("step failed"), logs.String())
	require.Equal(t, 1, logs.Count("step succeeds again"), logs.String())
	require.Contains(t, logs.String(), `"failures":5`, "the recovery says how many failed")
}
