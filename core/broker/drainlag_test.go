package broker

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testlog"
)

// While the oldest outbox result has waited longer than the bound, a sweep
// claims only the rollups of rollup kinds' pairs (within their own room)
// and asks no other pair, not even in a probe; it reads the outbox at most
// once per lagEvery, and claims everything again once the wait is back
// under the bound. An idle sweep reads only while the last read found a
// wait. A failed read does not hold the claims back, and with no bound the
// outbox is never read.
func TestDispatcherSweep_ClaimsOnlyRollupsWhileTheDrainIsBehind(t *testing.T) {
	t.Parallel()
	pairBOM := pairKey{manifest.KindVersion{Kind: "bom", Version: "v1"}, pipeline.TaskReconcile}
	// sweepSaw is what one sweep asked of the claimer. The probe finds no
	// work for either pair, and every claim comes back empty.
	type sweepSaw struct {
		claims  []pipeline.Batch
		probed  bool
		lagRead int
	}
	setup := func(t *testing.T, bound time.Duration) (*dispatcherBundle, *time.Duration, *error, func(probe bool) sweepSaw) {
		b := setupDispatcher(t)
		b.d.maxDrainLag = bound
		b.d.rollupBound = func(p pairKey) (int, bool) { return 8, p == pairBOM }
		b.routes.PairsFn = func() []pairKey { return []pairKey{pairVPC, pairBOM} }
		lag, lagErr := new(time.Duration), new(error)
		var saw sweepSaw
		b.claimer.OutboxLagFn = func(_ context.Context, lo, hi int) (time.Duration, error) {
			require.Equal(t, [2]int{0, 255}, [2]int{lo, hi}, "the pod's own range")
			saw.lagRead++
			return *lag, *lagErr
		}
		b.claimer.ClaimableFn = func(_ context.Context, _, _ int, batches []pipeline.Batch) ([]bool, error) {
			saw.probed = true
			return make([]bool, len(batches)), nil
		}
		b.claimer.ClaimFn = func(_ context.Context, _ pipeline.Lease, bt pipeline.Batch) ([]pipeline.Task, error) {
			saw.claims = append(saw.claims, bt)
			return nil, nil
		}
		sweep := func(probe bool) sweepSaw {
			saw = sweepSaw{}
			b.d.sweep(context.Background(), context.Background(), context.Background(), 0, map[pairKey]time.Time{}, probe)
			return saw
		}
		return b, lag, lagErr, sweep
	}
	onlyRollups := pipeline.Batch{Kind: "bom", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 8, OnlyRollups: true}
	everything := []pipeline.Batch{
		{Kind: kvVPC.Kind, Version: kvVPC.Version, TaskType: pipeline.TaskReconcile, Max: 100},
		{Kind: "bom", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 100},
	}

	t.Run("BehindThenCaughtUp", func(t *testing.T) {
		t.Parallel()
		b, lag, _, sweep := setup(t, 2*time.Second)
		*lag = 2*time.Second + time.Millisecond
		saw := sweep(false)
		require.Equal(t, sweepSaw{claims: []pipeline.Batch{onlyRollups}, lagRead: 1}, saw, "behind: the rollups alone")
		require.InDelta(t, lag.Seconds(), testutil.ToFloat64(b.d.metrics.OutboxLag), 1e-9, "the gauge shows the wait read")

		*lag = 0 // drained, but the last read is still fresh
		b.clock.Advance(lagEvery - time.Millisecond)
		saw = sweep(false)
		require.Equal(t, sweepSaw{claims: []pipeline.Batch{onlyRollups}}, saw, "within lagEvery the last read stands")

		b.clock.Advance(time.Millisecond)
		saw = sweep(false)
		require.Equal(t, 1, saw.lagRead)
		require.ElementsMatch(t, everything, saw.claims, "caught up: every pair claims again")

		*lag = 2 * time.Second // at the bound is not behind
		b.clock.Advance(lagEvery)
		saw = sweep(false)
		require.ElementsMatch(t, everything, saw.claims)
	})

	t.Run("AProbingSweepBehindProbesNothing", func(t *testing.T) {
		t.Parallel()
		b, lag, _, sweep := setup(t, time.Second)
		*lag = time.Minute
		require.Equal(t, []pipeline.Batch{onlyRollups}, sweep(false).claims)
		b.clock.Advance(lagEvery)
		require.Equal(t, sweepSaw{claims: []pipeline.Batch{onlyRollups}, lagRead: 1}, sweep(true),
			"no pair but the rollups' is claimed from: nothing to probe")
	})

	t.Run("AnIdlePollReadsNothing", func(t *testing.T) {
		t.Parallel()
		_, _, _, sweep := setup(t, time.Second)
		require.Equal(t, sweepSaw{probed: true}, sweep(true), "no claimable pair: an idle poll costs its probe alone")
	})

	t.Run("AnIdlePollReadsUntilTheOutboxIsEmpty", func(t *testing.T) {
		t.Parallel()
		b, lag, _, sweep := setup(t, 2*time.Second)
		idlePoll := func() sweepSaw {
			b.clock.Advance(lagEvery)
			return sweep(true)
		}
		*lag = 500 * time.Millisecond // results waited, under the bound
		require.Equal(t, 1, sweep(false).lagRead)

		*lag = 3 * time.Second // the drain fell behind while nothing was claimed
		require.Equal(t, 1, idlePoll().lagRead, "an idle poll reads while results waited at the last read")
		require.True(t, b.d.behind, "and sees the drain fall behind")
		require.InDelta(t, 3.0, testutil.ToFloat64(b.d.metrics.OutboxLag), 1e-9)

		*lag = 0 // drained
		require.Equal(t, 1, idlePoll().lagRead)
		require.False(t, b.d.behind)
		require.Zero(t, testutil.ToFloat64(b.d.metrics.OutboxLag), "the gauge follows the drain to empty")

		require.Zero(t, idlePoll().lagRead, "once seen empty, an idle poll reads nothing")
	})

	t.Run("AFailedReadHoldsNothingBack", func(t *testing.T) {
		t.Parallel()
		_, lag, lagErr, sweep := setup(t, time.Second)
		*lag, *lagErr = time.Minute, errors.New("connection refused")
		saw := sweep(false)
		require.Equal(t, 1, saw.lagRead)
		require.ElementsMatch(t, everything, saw.claims)
	})

	t.Run("NoBoundNoRead", func(t *testing.T) {
		t.Parallel()
		_, lag, _, sweep := setup(t, 0)
		*lag = time.Hour
		saw := sweep(false)
		require.Zero(t, saw.lagRead)
		require.ElementsMatch(t, everything, saw.claims)
	})
}

// A read of the outbox's lag that fails with an error of its own (not the
// database unreachable, which the claims' own statements report) leaves
// the claims unpaced: that is said once, and once more when a read
// answers again. It was swallowed, and a broker whose reads kept failing
// ran ahead of the drain with nothing in its log to say why.
func TestDispatcherSweep_AFailingLagReadIsLoggedOnce(t *testing.T) {
	t.Parallel()
	b := setupDispatcher(t)
	var logs testlog.Buffer
	b.d.log = zerolog.New(&logs)
	b.d.maxDrainLag = 2 * time.Second
	var lagErr atomic.Pointer[error]
	failed := errors.New("read the outbox's lag (shards 0-255): function outbox_lag does not exist")
	lagErr.Store(&failed)
	b.claimer.OutboxLagFn = func(context.Context, int, int) (time.Duration, error) { return 0, *lagErr.Load() }
	sweep := func() {
		b.d.sweep(context.Background(), context.Background(), context.Background(), 0, map[pairKey]time.Time{}, false)
		b.clock.Advance(lagEvery)
	}
	for range 3 {
		sweep()
	}
	require.Equal(t, 1, logs.Count("read the outbox's lag failed"), logs.String())
	var none error
	lagErr.Store(&none)
	sweep()
	sweep()
	require.Equal(t, 1, logs.Count("outbox's lag reads again"), logs.String())
	require.Equal(t, 1, logs.Count("read the outbox's lag failed"), logs.String())
}
