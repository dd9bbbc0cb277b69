package cluster_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/engine/enginetest"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/testlog"
)

type reactorFn func(ctx context.Context) error

func (f reactorFn) Name() string                    { return "fn" }
func (f reactorFn) React(ctx context.Context) error { return f(ctx) }

func TestTopologyWatcher_ReactsAtStartAndOnEveryPoll(t *testing.T) {
	t.Parallel()
	clock := enginetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reacted := make(chan struct{}, 10)
	var calls atomic.Int32
	w := &cluster.TopologyWatcher{Poll: 10 * time.Second, Clock: clock, Log: zerolog.Nop(),
		Reactors: []cluster.Reactor{reactorFn(func(context.Context) error {
			defer func() { reacted <- struct{}{} }()
			if calls.Add(1) == 1 {
				return errors.New("conn closed") // the first read after a database restart
			}
			return nil
		})}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	awaitReaction(t, reacted)
	// A failed reaction is retried within the backoff (100 ms ±25%), not
	// after the 10 s poll: its view of the members is stale, and the wakes
	// that would have corrected it may have come and gone.
	require.True(t, clock.WaitForWaiters(1, 5*time.Second))
	clock.Advance(200 * time.Millisecond)
	awaitReaction(t, reacted)
	// Once it succeeds, the next reaction is the poll's.
	require.True(t, clock.WaitForWaiters(1, 5*time.Second))
	clock.Advance(9 * time.Second)
	require.Empty(t, reacted, "no reaction before the poll")
	clock.Advance(time.Second)
	awaitReaction(t, reacted)
	require.Equal(t, int32(3), calls.Load())
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Second):
		t.Fatal("the watcher did not stop within a second of cancel")
	}
}

// awaitReaction waits for the next reaction, failing after 5 s.
func awaitReaction(t *testing.T, reacted <-chan struct{}) {
	t.Helper()
	select {
	case <-reacted:
	case <-time.After(5 * time.Second):
		t.Fatal("no reaction within 5 s")
	}
}

func TestResharder_React(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason  string
		start   shard.Range
		assign  shard.Range
		changed bool
	}{
		"Retiled":   {reason: "a new range is swapped in and announced", start: shard.All, assign: shard.Between(0, 127), changed: true},
		"Unchanged": {reason: "the same range is not re-announced", start: shard.All, assign: shard.All},
		"Emptied":   {reason: "a member that lost its range owns nothing", start: shard.All, assign: shard.Range{}, changed: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			set := cluster.NewShardSet(tc.start)
			changes := 0
			r := &cluster.Resharder{Registry: &registryFns{
				AssignShardsFn: func(_ context.Context, id string, total int, _ time.Duration) (shard.Range, error) {
					require.Equal(t, "m1", id)
					require.Equal(t, shard.Total, total)
					return tc.assign, nil
				}}, MemberID: "m1", Shards: set, OnChange: func() { changes++ }, Log: zerolog.Nop()}
			require.NoError(t, r.React(context.Background()))
			require.Equal(t, tc.assign, set.Span(), tc.reason)
			require.Equal(t, tc.changed, changes == 1, tc.reason)
		})
	}
}

// The liveness lock lost while the assignment is read: its OnLost empties
// the range, and the resharder's swap, which read the lock as held before,
// must not hand the range back (the member would claim without its lock).
func TestResharder_ALockLostDuringTheAssignmentLeavesTheRangeEmpty(t *testing.T) {
	t.Parallel()
	set := cluster.NewShardSet(shard.All)
	var held atomic.Bool
	held.Store(true)
	r := &cluster.Resharder{Registry: &registryFns{
		AssignShardsFn: func(context.Context, string, int, time.Duration) (shard.Range, error) {
			held.Store(false)      // the lock's check failed…
			set.Set(shard.Range{}) // …and its OnLost emptied the range
			return shard.Between(0, 127), nil
		}}, MemberID: "m1", Shards: set, Held: held.Load, Log: zerolog.Nop()}
	require.NoError(t, r.React(context.Background()))
	require.True(t, set.Span().Empty(), "no range while the lock is not held, got %v", set.Span())
}

// A reaction that keeps failing with an error of its own (not the database
// being unreachable, which the outage reporter logs once) is retried with
// backoff, up to a second apart: it is logged once when it starts failing
// and once when it succeeds again, not on every retry.
func TestTopologyWatcher_AFailingReactionIsLoggedOnceUntilItSucceeds(t *testing.T) {
	t.Parallel()
	clock := enginetest.NewClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	reacted := make(chan struct{}, 10)
	var calls atomic.Int32
	var logs testlog.Buffer
	w := &cluster.TopologyWatcher{Poll: time.Hour, Clock: clock, Log: zerolog.New(&logs),
		Reactors: []cluster.Reactor{reactorFn(func(context.Context) error {
			defer func() { reacted <- struct{}{} }()
			if calls.Add(1) <= 5 {
				return errors.New("canceling statement due to statement timeout")
			}
			return nil
		})}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	awaitReaction(t, reacted)
	for range 5 { // four retries fail, the fifth succeeds
		require.True(t, clock.WaitForWaiters(1, 5*time.Second))
		clock.Advance(2 * time.Second) // past any backoff
		awaitReaction(t, reacted)
	}
	cancel()
	require.NoError(t, <-done)
	require.Equal(t, 1, logs.Count("topology reaction failed"), logs.String())
	require.Equal(t, 1, logs.Count("topology reaction succeeds again"), logs.String())
}

// A re-tile to the empty range is logged as empty, with no bounds: an
// empty range has none, and "shard_hi -1" is not a shard.
func TestResharder_AnEmptiedRangeIsLoggedWithoutBounds(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	set := cluster.NewShardSet(shard.All)
	r := &cluster.Resharder{Registry: &registryFns{
		AssignShardsFn: func(context.Context, string, int, time.Duration) (shard.Range, error) { return shard.Range{}, nil }},
		MemberID: "m1", Shards: set, Log: zerolog.New(&logs)}
	require.NoError(t, r.React(context.Background()))
	require.Equal(t, 1, logs.Count(`"empty":true`), logs.String())
	require.Equal(t, 0, logs.Count(`"shard_hi"`), logs.String())
	require.Equal(t, 0, logs.Count(`"shard_lo"`), logs.String())
}
