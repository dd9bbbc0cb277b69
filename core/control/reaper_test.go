package control

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
)

func TestReaper_Tick(t *testing.T) {
	t.Parallel()
	everyPass := map[string]int{"reap_stale_work": 1, "requeue_failed_and_pending": 2, "delete_unclaimed_work": 3,
		"sweep_deletable": 4, "recount_inflight": 5, "reap_stale_lifecycle": 6, "rewalk_rollups": 8}
	cases := map[string]struct {
		reason      string
		shards      shard.Range
		withOrphans bool
		failing     string
		want        map[string]int
	}{
		"EveryPass": {reason: "a plain tick runs every pass but the orphan sweep", shards: shard.Between(32, 63),
			want: everyPass},
		"WithOrphans": {reason: "an orphan tick adds the orphan sweep and the kept configs' sweep", shards: shard.Between(32, 63),
			withOrphans: true, want: with(with(everyPass, "sweep_expired_orphans", 7), "sweep_pruned_configs", 9)},
		"OneFails": {reason: "a failed pass is logged and the others still run", shards: shard.All,
			failing: "sweep_deletable", want: with(everyPass, "sweep_deletable", -1)},
		"NoShards": {reason: "a pod that owns no shard runs no pass"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			seen := map[string]shard.Range{}
			pass := func(name string, n int) (int, error) {
				if name == tc.failing {
					return 0, errors.New("boom")
				}
				return n, nil
			}
			rec := func(name string, r shard.Range) { seen[name] = r }
			r := &Reaper{Maintenance: &reaperStoreFns{
				ReapStaleWorkFn: func(_ context.Context, r shard.Range, d time.Duration) (int, error) {
					require.Equal(t, 60*time.Second, d, "StaleAfter default")
					rec("reap_stale_work", r)
					return pass("reap_stale_work", 1)
				},
				RequeueFailedAndPendingFn: func(_ context.Context, r shard.Range, limit int, d time.Duration) (int, error) {
					require.Equal(t, 1000, limit)
					require.Equal(t, 15*time.Second, d, "RetryAfter default")
					rec("requeue_failed_and_pending", r)
					return pass("requeue_failed_and_pending", 2)
				},
				DeleteUnclaimedWorkFn: func(_ context.Context, r shard.Range, _ time.Duration) (int, error) {
					rec("delete_unclaimed_work", r)
					return pass("delete_unclaimed_work", 3)
				},
				SweepDeletableFn: func(_ context.Context, r shard.Range, _ int) (int, error) {
					rec("sweep_deletable", r)
					return pass("sweep_deletable", 4)
				},
				RecountInflightFn: func(_ context.Context, r shard.Range) (int, error) {
					rec("recount_inflight", r)
					return pass("recount_inflight", 5)
				},
				ReapStaleLifecycleFn: func(_ context.Context, r shard.Range, _ time.Duration) (int, error) {
					rec("reap_stale_lifecycle", r)
					return pass("reap_stale_lifecycle", 6)
				},
				SweepExpiredOrphansFn: func(_ context.Context, r shard.Range, _ int) (int, error) {
					rec("sweep_expired_orphans", r)
					return pass("sweep_expired_orphans", 7)
				},
				RewalkRollupsFn: func(_ context.Context, r shard.Range, limit int) (maintenance.Rewalk, error) {
					require.Equal(t, 1000, limit)
					rec("rewalk_rollups", r)
					n, err := pass("rewalk_rollups", 8)
					return maintenance.Rewalk{Walked: 9, Pended: n}, err
				},
				SweepPrunedConfigsFn: func(_ context.Context, limit int) (int, error) {
					require.Equal(t, 1000, limit)
					return pass("sweep_pruned_configs", 9)
				},
			}, Shards: newShardSet(tc.shards), Log: zerolog.Nop()}
			r.TestSignals.Init()
			r.Tick(context.Background(), tc.withOrphans)
			got := r.TestSignals.Ticked.WaitOrTimeout(t)
			require.Equal(t, tc.want, got, tc.reason)
			for name, rng := range seen {
				require.Equal(t, tc.shards, rng, "%s runs on the owned range", name)
			}
		})
	}
}

func with(m map[string]int, k string, v int) map[string]int {
	out := map[string]int{k: v}
	for kk, vv := range m {
		if kk != k {
			out[kk] = vv
		}
	}
	return out
}

func TestReaper_RunsOrphansEveryOrphanEveryTicks(t *testing.T) {
	t.Parallel()
	clock := newClock()
	orphans := 0
	r := &Reaper{Maintenance: &reaperStoreFns{SweepExpiredOrphansFn: func(context.Context, shard.Range, int) (int, error) {
		orphans++
		return 0, nil
	}}, Shards: allShards(), Log: zerolog.Nop(), Clock: clock, OrphanEvery: 3}
	r.TestSignals.Init()
	runService(t, r)
	for i := range 7 {
		if i > 0 {
			advanceOnce(t, clock, 5*time.Second)
		}
		got := r.TestSignals.Ticked.WaitOrTimeout(t)
		_, ran := got["sweep_expired_orphans"]
		require.Equal(t, i%3 == 0, ran, "tick %d", i)
	}
	require.Equal(t, 3, orphans, "ticks 0, 3 and 6")
}

func TestReaper_PassTimeoutCancelsARunawayPass(t *testing.T) {
	t.Parallel()
	clock := newClock()
	outage := &engine.Outage{Log: zerolog.Nop(), Clock: clock}
	r := &Reaper{Maintenance: &reaperStoreFns{ReapStaleWorkFn: func(ctx context.Context, _ shard.Range, _ time.Duration) (int, error) {
		<-ctx.Done() // a pass stuck on a lock
		return 0, ctx.Err()
	}}, Shards: allShards(), Log: zerolog.Nop(), PassTimeout: 10 * time.Millisecond, Outage: outage, Clock: clock}
	r.TestSignals.Init()
	ended := outage.Ended()
	r.Tick(context.Background(), false)
	got := r.TestSignals.Ticked.WaitOrTimeout(t)
	require.Equal(t, -1, got["reap_stale_work"], "the runaway pass failed on its own deadline")
	require.Contains(t, got, "reap_stale_lifecycle", "the passes after it still ran")
	// Not taken for the database gone: no outage began, so none ends (and
	// sets off a catch-up) when the next pass succeeds.
	clock.Advance(time.Minute)
	outage.Succeeded()
	select {
	case <-ended:
		t.Fatal("a runaway pass was reported as a database outage")
	default:
	}
}

// A catch-up that moved a full batch asks Run to tick again at once; if the
// range empties meanwhile (the liveness lock lost, a re-tile), Run waits
// for its next tick instead of spinning on the empty range.
func TestReaper_AnEmptiedRangeStopsTheCatchUpWithoutSpinning(t *testing.T) {
	t.Parallel()
	clock := newClock()
	outage := &engine.Outage{Log: zerolog.Nop(), Clock: clock}
	shards := allShards()
	windows := make(chan time.Duration, 8)
	r := &Reaper{Maintenance: &reaperStoreFns{RequeueFailedAndPendingFn: func(_ context.Context, _ shard.Range, limit int, d time.Duration) (int, error) {
		windows <- d
		if d == 0 {
			shards.Set(shard.Range{}) // the lock is lost while the catch-up runs
			return limit, nil         // a full batch: more to rebuild
		}
		return 0, nil
	}}, Shards: shards, Log: zerolog.Nop(), Clock: clock, Outage: outage}
	r.TestSignals.Init()
	runService(t, r)
	require.Equal(t, 15*time.Second, recvWindow(t, windows), "an ordinary tick")
	r.TestSignals.Ticked.WaitOrTimeout(t)

	require.True(t, outage.Failed("claim", syscall.ECONNREFUSED))
	clock.Advance(3 * time.Second)
	outage.Succeeded()
	require.Equal(t, time.Duration(0), recvWindow(t, windows), "the catch-up")
	r.TestSignals.Ticked.WaitOrTimeout(t)
	if !clock.WaitForWaiters(2, 5*time.Second) { // the first tick's wait, and a new one
		t.Fatal("the reaper never waited for its next tick: it spins on the empty range")
	}

	shards.Set(shard.All) // the range is back: the catch-up still owed runs
	clock.Advance(5 * time.Second)
	require.Equal(t, time.Duration(0), recvWindow(t, windows), "the catch-up resumes with the range")
}

func TestReaper_AnnouncesWorkReadyAfterAPassThatPended(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		moved  string // the one pass that moves a row
		want   bool
	}{
		"Nothing":        {reason: "an idle tick sends nothing"},
		"StaleLease":     {reason: "a reaped lease is pending again", moved: "reap_stale_work", want: true},
		"Requeued":       {reason: "a crash catch-up pended a resource", moved: "requeue_failed_and_pending", want: true},
		"Rewalked":       {reason: "a crash rewalk pended a composite's rollup", moved: "rewalk_rollups", want: true},
		"Sweep":          {reason: "the delete sweep can pend teardowns", moved: "sweep_deletable", want: true},
		"Orphans":        {reason: "an expired orphan's deletion is pending work", moved: "sweep_expired_orphans", want: true},
		"RecountOnly":    {reason: "a cap recount pends nothing", moved: "recount_inflight"},
		"UnclaimedOnly":  {reason: "deleting abandoned rows pends nothing", moved: "delete_unclaimed_work"},
		"LifecycleReaps": {reason: "re-armed reactor deliveries ride lifecycle_ready", moved: "reap_stale_lifecycle"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			one := func(pass string) (int, error) {
				if pass == tc.moved {
					return 1, nil
				}
				return 0, nil
			}
			notified := 0
			r := &Reaper{Maintenance: &reaperStoreFns{
				ReapStaleWorkFn: func(context.Context, shard.Range, time.Duration) (int, error) { return one("reap_stale_work") },
				RequeueFailedAndPendingFn: func(context.Context, shard.Range, int, time.Duration) (int, error) {
					return one("requeue_failed_and_pending")
				},
				DeleteUnclaimedWorkFn: func(context.Context, shard.Range, time.Duration) (int, error) {
					return one("delete_unclaimed_work")
				},
				SweepDeletableFn:  func(context.Context, shard.Range, int) (int, error) { return one("sweep_deletable") },
				RecountInflightFn: func(context.Context, shard.Range) (int, error) { return one("recount_inflight") },
				ReapStaleLifecycleFn: func(context.Context, shard.Range, time.Duration) (int, error) {
					return one("reap_stale_lifecycle")
				},
				SweepExpiredOrphansFn: func(context.Context, shard.Range, int) (int, error) { return one("sweep_expired_orphans") },
				RewalkRollupsFn: func(context.Context, shard.Range, int) (maintenance.Rewalk, error) {
					n, err := one("rewalk_rollups")
					return maintenance.Rewalk{Pended: n}, err
				},
				NotifyWorkReadyFn: func(context.Context) error { notified++; return nil },
			}, Shards: allShards(), Log: zerolog.Nop()}
			r.Tick(context.Background(), true)
			want := 0
			if tc.want {
				want = 1
			}
			require.Equal(t, want, notified, tc.reason)
		})
	}
}

// When a database outage ends the reaper ticks at once, and that tick's
// crash catch-up skips its retry window: a crash restart of Postgres wiped
// the UNLOGGED queue, and its work is re-pended now, not RetryAfter later.
// The tick after it is an ordinary one.
func TestReaper_CatchesUpAtOnceWhenAnOutageEnds(t *testing.T) {
	t.Parallel()
	clock := newClock()
	outage := &engine.Outage{Log: zerolog.Nop(), Clock: clock}
	windows := make(chan time.Duration, 8)
	r := &Reaper{Maintenance: &reaperStoreFns{RequeueFailedAndPendingFn: func(_ context.Context, _ shard.Range, _ int, d time.Duration) (int, error) {
		windows <- d
		return 0, nil
	}}, Shards: allShards(), Log: zerolog.Nop(), Clock: clock, Outage: outage}
	r.TestSignals.Init()
	runService(t, r)
	require.Equal(t, 15*time.Second, recvWindow(t, windows), "an ordinary tick")
	r.TestSignals.Ticked.WaitOrTimeout(t)

	require.True(t, outage.Failed("claim", syscall.ECONNREFUSED))
	clock.Advance(3 * time.Second) // past the outage's settle window, short of the next tick
	outage.Succeeded()
	require.Equal(t, time.Duration(0), recvWindow(t, windows), "the tick the outage's end triggers catches up at once")
	r.TestSignals.Ticked.WaitOrTimeout(t)
	// The first tick's wait (due at t0+5s) was left behind when the
	// outage's end won the select, and stays registered: wait for the
	// reaper's new wait beside it before advancing. Advanced on the old one
	// alone, the clock could pass before the new wait was made, leaving it
	// due 5 s after the advance, never reached (a CI failure under -race).
	if !clock.WaitForWaiters(2, 5*time.Second) {
		t.Fatal("the reaper never waited for its next tick")
	}
	clock.Advance(5 * time.Second)
	require.Equal(t, 15*time.Second, recvWindow(t, windows), "then ordinary ticks again")
}

// An outage that begins and ends while a tick runs still triggers the
// catch-up tick: the reaper watches for the end from before the tick, not
// from its wait after it (then the channel was the next outage's, and the
// catch-up waited for the next ordinary tick).
func TestReaper_CatchesUpWhenAnOutageEndsDuringATick(t *testing.T) {
	t.Parallel()
	clock := newClock()
	outage := &engine.Outage{Log: zerolog.Nop(), Clock: clock}
	windows := make(chan time.Duration, 8)
	first := true
	r := &Reaper{Maintenance: &reaperStoreFns{RequeueFailedAndPendingFn: func(_ context.Context, _ shard.Range, _ int, d time.Duration) (int, error) {
		if first { // the outage comes and goes inside the first tick
			first = false
			// (on the reaper's goroutine: an outage not begun here never
			// ends, and the test fails on its deadline below)
			outage.Failed("claim", syscall.ECONNREFUSED)
			clock.Advance(3 * time.Second) // past the settle window, short of the next tick
			outage.Succeeded()
		}
		windows <- d
		return 0, nil
	}}, Shards: allShards(), Log: zerolog.Nop(), Clock: clock, Outage: outage}
	runService(t, r)
	require.Equal(t, 15*time.Second, recvWindow(t, windows), "an ordinary tick")
	require.Equal(t, time.Duration(0), recvWindow(t, windows), "the outage that ended during the tick is caught up at once")
}

// recvWindow is the next retry window the reaper's pass was called with,
// or the test's failure after a deadline.
func recvWindow(t *testing.T, windows <-chan time.Duration) time.Duration {
	t.Helper()
	select {
	case d := <-windows:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the reaper's pass did not run")
		return 0
	}
}
