package control

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
)

type stepWant struct {
	busy      bool
	err       error
	announces int
}

func TestDrainer_Step(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	cases := map[string]struct {
		reason    string
		shards    shard.Range
		drained   int
		rechecked int
		drainErr  error
		want      stepWant
	}{
		"Idle": {reason: "a step that applied nothing announces nothing"},
		"Applied": {reason: "a drain that applied rows announces work_ready once its lane committed",
			drained: 3, want: stepWant{announces: 2}},
		"Rechecked": {reason: "a recheck that pended roots announces too", rechecked: 1,
			want: stepWant{announces: 2}},
		"FullBatch": {reason: "a full batch means more may be waiting: busy", drained: 10,
			want: stepWant{busy: true, announces: 2}},
		"DrainFails": {reason: "a failed drain skips its rechecks, announces nothing and returns the error",
			drained: 5, drainErr: boom, want: stepWant{err: boom}},
		"NoShards": {reason: "a pod that owns no shard drains nothing", shards: shard.Range{Lo: 1, Hi: 1}, drained: 5},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rng := tc.shards
			if rng == (shard.Range{}) {
				rng = shard.All
			}
			var mu sync.Mutex
			var lanes []shard.Range
			var rechecks atomic.Int32
			d := &Drainer{Pipeline: &drainStoreFns{
				DrainOutboxBatchFn: func(_ context.Context, limit, lo, hi int) (int, error) {
					require.Equal(t, 10, limit)
					mu.Lock()
					lanes = append(lanes, shard.Between(lo, hi))
					mu.Unlock()
					return tc.drained, tc.drainErr
				},
				DrainRollupRechecksFn: func(context.Context, int, int, int) (int, error) {
					rechecks.Add(1)
					return tc.rechecked, nil
				},
			}, Shards: newShardSet(rng), Log: zerolog.Nop(), Batch: 10}
			d.defaults()
			var announces atomic.Int32
			busy, err := d.step(context.Background(), func() { announces.Add(1) })
			require.Equal(t, tc.want.busy, busy, tc.reason)
			require.ErrorIs(t, err, tc.want.err, tc.reason)
			require.Equal(t, tc.want.announces, int(announces.Load()), tc.reason)
			if rng.Empty() {
				require.Empty(t, lanes, tc.reason)
				return
			}
			require.ElementsMatch(t, []shard.Range{shard.Between(0, 127), shard.Between(128, 255)}, lanes,
				"two lanes split at partition boundaries")
			wantRechecks := int32(2)
			if tc.drainErr != nil {
				wantRechecks = 0
			}
			require.Equal(t, wantRechecks, rechecks.Load(), "rechecks run after every drain that succeeded")
		})
	}
}

func TestDrainer_AnnouncesWorkReadyAfterADrainThatApplied(t *testing.T) {
	t.Parallel()
	clock := newClock()
	var calls atomic.Int32
	d := &Drainer{Pipeline: &drainStoreFns{
		DrainOutboxBatchFn: func(context.Context, int, int, int) (int, error) {
			if calls.Add(1) == 1 {
				return 4, nil
			}
			return 0, nil
		},
	}, Shards: newShardSet(shard.Between(0, 15)), Log: zerolog.Nop(), Clock: clock}
	d.TestSignals.Init()
	runService(t, d)
	require.Equal(t, 4, d.TestSignals.Drained.WaitOrTimeout(t).Drained)
	require.NoError(t, d.TestSignals.NotifiedWorkReady.WaitOrTimeout(t))

	// the idle poll (5 ms) and the coalescer's gap (20 ms) both wait
	require.True(t, clock.WaitForWaiters(2, 5*time.Second))
	clock.Advance(10 * time.Millisecond) // the idle poll runs again: nothing applied
	require.Equal(t, 0, d.TestSignals.Drained.WaitOrTimeout(t).Drained)
	clock.Advance(time.Second)
	d.TestSignals.NotifiedWorkReady.RequireEmpty(t)
}

// A range handed back (a re-tile, or the liveness lock held again after a
// database restart) is drained at once: the drainer idled while it owned
// nothing, and its idle wait (up to the 2 s failsafe) must not hold the
// results that waited through the outage. The clock never moves here.
func TestDrainer_DrainsAtOnceWhenItsRangeIsHandedBack(t *testing.T) {
	t.Parallel()
	clock := newClock()
	d := &Drainer{Pipeline: &drainStoreFns{
		DrainOutboxBatchFn: func(context.Context, int, int, int) (int, error) { return 3, nil },
	}, Shards: newShardSet(shard.Range{}), Log: zerolog.Nop(), Clock: clock}
	d.TestSignals.Init()
	runService(t, d)
	require.True(t, clock.WaitForWaiters(1, 5*time.Second), "idle: it owns nothing")
	d.Shards.Set(shard.Between(0, 15))
	require.Equal(t, 3, d.TestSignals.Drained.WaitOrTimeout(t).Drained, "the returned range is drained without waiting for the idle timer")
}

func TestWakeCoalescer(t *testing.T) {
	t.Parallel()
	t.Run("CoalescesWithATrailingEdge", func(t *testing.T) {
		t.Parallel()
		clock := newClock()
		sent := make(chan struct{}, 10)
		gate := make(chan struct{})
		first := true
		c := newWakeCoalescer(20*time.Millisecond, clock, func(context.Context) {
			sent <- struct{}{}
			if first {
				first = false
				<-gate // hold the first send while more requests arrive
			}
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); c.Run(ctx) }()
		defer func() { cancel(); <-done }()

		c.Request()
		<-sent
		for range 5 {
			c.Request() // during the send: folded into one trailing send
		}
		close(gate)
		advanceOnce(t, clock, 19*time.Millisecond)
		select {
		case <-sent:
			t.Fatal("a second send inside the gap")
		case <-time.After(20 * time.Millisecond):
		}
		clock.Advance(time.Millisecond)
		select {
		case <-sent:
		case <-time.After(5 * time.Second):
			t.Fatal("requests made during a send got no trailing send")
		}
		advanceOnce(t, clock, time.Hour)
		select {
		case <-sent:
			t.Fatal("a send with nothing requested")
		case <-time.After(20 * time.Millisecond):
		}
	})
	t.Run("RequestNeverBlocks", func(t *testing.T) {
		t.Parallel()
		c := newWakeCoalescer(time.Hour, newClock(), func(context.Context) {})
		for range 100 {
			c.Request() // no Run: must not block
		}
	})
}
