package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testlog"
)

// The dispatcher under failures of its own: a pair whose claim fails, a
// claimable probe that fails. Each is logged once and once on recovery.

// A pair whose claim keeps failing with an error of its own (not the
// database unreachable: a statement it cannot run, a scan a rolled binary
// cannot read) must neither be asked again on every sweep nor log each
// failure: under load the loop sweeps without pause for the other pairs,
// and the failing pair cost a statement and an ERROR line each time — as
// many a second as the sweeps. It is skipped for a dry window like an
// empty pair, logged once, and once more when it claims again.
func TestDispatcher_AFailingPairIsLoggedOnceAndNotAskedEverySweep(t *testing.T) {
	t.Parallel()
	const (
		claimFailed = "claim failed; retried quietly until it claims again"
		claimsAgain = "pair claims again"
	)
	b := setupDispatcher(t)
	var logs testlog.Buffer
	b.d.log = zerolog.New(&logs)
	pairSubnet := pairKey{manifest.KindVersion{Kind: "subnet", Version: "v1"}, pipeline.TaskReconcile}
	b.routes.PairsFn = func() []pairKey { return []pairKey{pairVPC, pairSubnet} }
	const busy = 20
	var failures, vpc, subnet atomic.Int32
	var broken atomic.Bool
	broken.Store(true)
	b.claimer.ClaimFn = func(_ context.Context, _ pipeline.Lease, batch pipeline.Batch) ([]pipeline.Task, error) {
		if batch.Kind == "subnet" {
			if broken.Load() {
				failures.Add(1)
				return nil, errors.New("scan claimed task: cannot scan")
			}
			if subnet.Add(1) > 1 {
				return nil, nil
			}
			return tasksOf(pairSubnet, 1), nil
		}
		if vpc.Add(1) > busy {
			return nil, nil
		}
		return tasksOf(pairVPC, 1), nil
	}
	b.start(t)
	sweeps := 1
	for b.d.testSignals.swept.WaitOrTimeout(t) > 0 { // the vpc pair keeps the loop sweeping
		sweeps++
	}
	require.Greater(t, sweeps, busy, "the loop swept while the vpc pair had work")
	require.EqualValues(t, 1, failures.Load(), "the failing pair is skipped for its dry window, not asked on every sweep")
	// Whole messages, not substrings: the failure's own line says "until it
	// claims again". Counted as Count("claims again"), it made the wait
	// below pass before any recovery, and fail for good (two, never one)
	// whenever the loop logged the recovery before the first check.
	require.Equal(t, 1, logs.CountMessage(claimFailed), logs.String())
	require.Zero(t, logs.CountMessage(claimsAgain), logs.String())

	broken.Store(false)
	// Past the dry window and the idle wait, again at each check: the loop
	// may not have armed its idle timer yet when the clock first moves, and
	// a fake clock fires only the timers armed before it is advanced.
	b.waitShowing(t, "the recovery logged", func() bool {
		b.clock.Advance(time.Hour)
		return logs.CountMessage(claimsAgain) > 0
	}, func() string {
		return fmt.Sprintf("claims of the failing pair: %d failed, %d since\nlog:\n%s",
			failures.Load(), subnet.Load(), logs.String())
	})
	require.Equal(t, 1, logs.CountMessage(claimsAgain), "its recovery is logged once: %s", logs.String())
	require.Equal(t, 1, logs.CountMessage(claimFailed), logs.String())
}

// The claimable probe runs on every wake, and under load whenever dry
// pairs' windows run out: one that keeps failing with an error of its own
// is logged once, and once more when it answers again, not on each run.
func TestDispatcher_AFailingProbeIsLoggedOnce(t *testing.T) {
	t.Parallel()
	b := setupDispatcher(t)
	var logs testlog.Buffer
	b.d.log = zerolog.New(&logs)
	b.routes.PairsFn = func() []pairKey { return []pairKey{pairVPC, pairVPCDe} }
	var broken atomic.Bool
	broken.Store(true)
	var probes atomic.Int32
	b.claimer.ClaimableFn = func(_ context.Context, _, _ int, batches []pipeline.Batch) ([]bool, error) {
		probes.Add(1)
		if broken.Load() {
			return nil, errors.New("probe claimable work: function claimable_pairs does not exist")
		}
		return make([]bool, len(batches)), nil
	}
	b.start(t)
	b.d.testSignals.idle.WaitOrTimeout(t)
	for range 5 {
		b.wake.fire()
		b.d.testSignals.idle.WaitOrTimeout(t)
	}
	require.EqualValues(t, 5, probes.Load(), "a probe a wake")
	require.Equal(t, 1, logs.Count("claimable probe failed"), logs.String())
	broken.Store(false)
	b.wake.fire()
	b.d.testSignals.idle.WaitOrTimeout(t)
	require.Equal(t, 1, logs.Count("claimable probe answers again"), logs.String())
	require.Equal(t, 1, logs.Count("claimable probe failed"), logs.String())
}
