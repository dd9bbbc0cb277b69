package broker

import (
	"context"
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/pipeline"
)

func setupHeartbeater(t *testing.T, held []pipeline.TaskKey) (*heartbeater, *fakeClock, *fakeLeases) {
	t.Helper()
	clock := newFakeClock()
	leases := &fakeLeases{HeartbeatFn: func(_ context.Context, _ string, _, _ int, keys []pipeline.TaskKey) (int, error) {
		return len(keys), nil
	}}
	h := &heartbeater{id: "broker-1", leases: leases, tasks: &fakeHeld{KeysFn: func() []pipeline.TaskKey { return held }},
		every: 5 * time.Second, clock: clock, log: testLog(t)}
	h.testSignals.beat.Init()
	return h, clock, leases
}

func TestHeartbeater(t *testing.T) {
	t.Parallel()

	run := func(t *testing.T, h *heartbeater) (stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- h.Run(ctx) }()
		return func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(5 * time.Second):
				t.Fatal("heartbeater did not stop")
			}
		}
	}

	t.Run("StopsImmediately", func(t *testing.T) {
		t.Parallel()
		h, clock, _ := setupHeartbeater(t, nil)
		stop := run(t, h)
		clock.waits.WaitOrTimeout(t)
		stop()
	})

	t.Run("CanRunMultipleTimes", func(t *testing.T) {
		t.Parallel()
		h, clock, _ := setupHeartbeater(t, []pipeline.TaskKey{{ShardID: 1}})
		for range 2 {
			stop := run(t, h)
			clock.Advance(clock.waits.WaitOrTimeout(t))
			require.Equal(t, 1, h.testSignals.beat.WaitOrTimeout(t))
			stop()
			for clock.waits.Pending() > 0 { // the stopped run's last wait
				clock.waits.WaitOrTimeout(t)
			}
		}
	})

	t.Run("BeatsEveryInterval", func(t *testing.T) {
		t.Parallel()
		h, clock, _ := setupHeartbeater(t, []pipeline.TaskKey{{ShardID: 1}, {ShardID: 2}})
		stop := run(t, h)
		defer stop()
		for range 3 {
			require.Equal(t, 5*time.Second, clock.waits.WaitOrTimeout(t))
			clock.Advance(5 * time.Second)
			require.Equal(t, 2, h.testSignals.beat.WaitOrTimeout(t))
		}
	})
}

// One heartbeat statement per work_queue partition the held tasks lie in,
// bounded by that partition (never by the pod's current ownership).
func TestHeartbeaterBeat(t *testing.T) {
	t.Parallel()
	type call struct {
		Lo, Hi int
		Shards []int
	}
	keys := func(shards ...int) []pipeline.TaskKey {
		out := make([]pipeline.TaskKey, len(shards))
		for i, s := range shards {
			out[i] = pipeline.TaskKey{ShardID: s}
		}
		return out
	}
	cases := map[string]struct {
		reason    string
		held      []pipeline.TaskKey
		failLo    int // a partition whose statement fails (-1: none)
		wantCalls []call
		wantBeat  int
	}{
		"NothingHeldNoStatement": {
			reason: "an idle broker costs the database nothing",
			failLo: -1,
		},
		"OneStatementPerPartition": {
			reason:    "each statement prunes to one partition",
			held:      keys(3, 17, 18, 40),
			failLo:    -1,
			wantCalls: []call{{0, 15, []int{3}}, {16, 31, []int{17, 18}}, {32, 47, []int{40}}},
			wantBeat:  4,
		},
		"AFailedPartitionDoesNotStopTheOthers": {
			reason:    "a failed statement is logged and the other partitions still renew",
			held:      keys(3, 17),
			failLo:    16,
			wantCalls: []call{{0, 15, []int{3}}, {16, 31, []int{17}}},
			wantBeat:  1,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h, _, leases := setupHeartbeater(t, tc.held)
			var mu sync.Mutex
			var calls []call
			leases.HeartbeatFn = func(_ context.Context, id string, lo, hi int, keys []pipeline.TaskKey) (int, error) {
				require.Equal(t, "broker-1", id)
				c := call{Lo: lo, Hi: hi}
				for _, k := range keys {
					c.Shards = append(c.Shards, k.ShardID)
				}
				sort.Ints(c.Shards)
				mu.Lock()
				calls = append(calls, c)
				mu.Unlock()
				if lo == tc.failLo {
					return 0, errors.New("connection reset")
				}
				return len(keys), nil
			}
			got := h.beat(context.Background())
			sort.Slice(calls, func(i, j int) bool { return calls[i].Lo < calls[j].Lo })
			require.Empty(t, cmp.Diff(tc.wantCalls, calls), "%s (-want +got)", tc.reason)
			require.Equal(t, tc.wantBeat, got, tc.reason)
		})
	}
}
