package control

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/core/testsignal"
)

// ReaperStore is the maintenance passes the reaper runs, each over one
// shard range, each returning the rows it moved.
type ReaperStore interface {
	ReapStaleWork(ctx context.Context, r shard.Range, staleAfter time.Duration) (int, error)
	RequeueFailedAndPending(ctx context.Context, r shard.Range, limit int, retryAfter time.Duration) (int, error)
	RewalkRollups(ctx context.Context, r shard.Range, limit int) (maintenance.Rewalk, error)
	DeleteUnclaimedWork(ctx context.Context, r shard.Range, after time.Duration) (int, error)
	SweepDeletable(ctx context.Context, r shard.Range, limit int) (int, error)
	RecountInflight(ctx context.Context, r shard.Range) (int, error)
	ReapStaleLifecycle(ctx context.Context, r shard.Range, staleAfter time.Duration) (int, error)
	SweepExpiredOrphans(ctx context.Context, r shard.Range, limit int) (int, error)
	// SweepPrunedConfigs is not sharded (providerconfigs are not): every
	// pod runs it, and concurrent passes skip each other's rows.
	SweepPrunedConfigs(ctx context.Context, limit int) (int, error)
	// NotifyWorkReady sends work_ready in a statement of its own.
	NotifyWorkReady(ctx context.Context) error
}

// pendingPasses are the passes whose moved rows are pending work: a tick in
// which any of them moved rows ends with a work_ready NOTIFY sent after the
// passes committed (their own notify_gated may have lost the gate's window).
var pendingPasses = map[string]bool{
	"reap_stale_work": true, "requeue_failed_and_pending": true, "rewalk_rollups": true, "sweep_deletable": true,
	"sweep_expired_orphans": true,
}

// Reaper runs the backstop passes over this pod's shard range every tick:
// stale leases, crash catch-up (lagging rows and open operations, then the
// composites' rollups after a crash restart of Postgres: rewalk_rollups),
// abandoned-work GC, the delete sweep, the
// concurrency-cap recount, stale lifecycle claims, and (every OrphanEvery-th
// tick: the deadline is absolute, a coarse cadence keeps even the idle probe
// off most ticks) the orphan-grace sweep and the sweep of kept providerconfigs
// no resource names any more.
type Reaper struct {
	Maintenance ReaperStore
	Shards      *cluster.ShardSet
	Log         zerolog.Logger
	// Outage is the process's shared database-outage reporter (nil: errors
	// are logged).
	Outage *engine.Outage
	Clock  engine.Clock // nil: the wall clock

	Every          time.Duration // default 5s
	StaleAfter     time.Duration // lease heartbeat lapse (default 60s)
	RetryAfter     time.Duration // catch-up retry window (default 15s)
	UnclaimedAfter time.Duration // SWEEPER_UNCLAIMED_DELETE_AFTER (default 24h)
	LifecycleStale time.Duration // reactor claim lapse (default 60s)
	OrphanEvery    int           // default 6
	Max            int           // rows per pass (default 1000)
	// PassTimeout bounds one pass (default 60s): a pass that runs away
	// (a pathological plan, a lock it waits on) is cancelled and logged
	// instead of holding every other pass of the tick behind it.
	PassTimeout time.Duration

	TestSignals ReaperTestSignals

	// catchUp: an outage just ended; the next crash catch-up pass skips its
	// retry window (a crash restart wiped the UNLOGGED queue: every lagging
	// row without a task is one to re-pend now, not in RetryAfter).
	catchUp atomic.Bool
	// rebuildMore: the last catch-up pass moved a full batch.
	rebuildMore atomic.Bool
}

// ReaperTestSignals report the reaper's progress to tests.
type ReaperTestSignals struct {
	// Ticked carries the passes one tick ran, each with the rows it moved
	// (-1 when it failed); nil when the pod owns no shard.
	Ticked testsignal.Signal[map[string]int]
	// NotifiedWorkReady fires after a tick that pended work sent work_ready.
	NotifiedWorkReady testsignal.Signal[struct{}]
}

// Init arms every signal.
func (ts *ReaperTestSignals) Init() {
	ts.Ticked.Init()
	ts.NotifiedWorkReady.Init()
}

// Name implements engine.Duty.
func (r *Reaper) Name() string { return "reaper" }

func (r *Reaper) defaults() {
	if r.Every <= 0 {
		r.Every = 5 * time.Second
	}
	if r.StaleAfter <= 0 {
		r.StaleAfter = 60 * time.Second
	}
	if r.RetryAfter <= 0 {
		r.RetryAfter = 15 * time.Second
	}
	if r.UnclaimedAfter <= 0 {
		r.UnclaimedAfter = maintenance.DefaultUnclaimedAfter
	}
	if r.LifecycleStale <= 0 {
		r.LifecycleStale = 60 * time.Second
	}
	if r.OrphanEvery <= 0 {
		r.OrphanEvery = 6
	}
	if r.Max <= 0 {
		r.Max = 1000
	}
	if r.PassTimeout <= 0 {
		r.PassTimeout = 60 * time.Second
	}
}

// Run ticks until ctx ends, and at once when a database outage ends (then
// with the catch-up pass's retry window skipped: a crash restart of
// Postgres comes back with the UNLOGGED queue empty, and the work it held
// must not wait RetryAfter to be rebuilt). The outage's end is watched
// from before the first tick and again as soon as one is seen, so an
// outage that ends while a tick runs still triggers its catch-up: a
// channel taken only at the wait would belong to the next outage.
func (r *Reaper) Run(ctx context.Context) error {
	r.defaults()
	clock := clockOr(r.Clock)
	ended := r.Outage.Ended()
	for tick := 0; ; tick++ {
		r.Tick(ctx, tick%r.OrphanEvery == 0)
		if r.rebuildMore.Load() && ctx.Err() == nil {
			continue // a catch-up that moved a full batch: rebuild the rest now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-clock.After(r.Every):
		case <-ended:
			r.catchUp.Store(true)
			ended = r.Outage.Ended()
		}
	}
}

// Tick runs every pass once (orphans too when withOrphans).
func (r *Reaper) Tick(ctx context.Context, withOrphans bool) {
	r.defaults()
	rng := r.Shards.Span()
	if rng.Empty() {
		// Nothing to rebuild here now (the lock lost, a re-tile): Run
		// waits for its next tick instead of spinning on an empty range.
		// A catch-up still owed runs once the range is back.
		r.rebuildMore.Store(false)
		r.TestSignals.Ticked.Signal(nil)
		return
	}
	moved := map[string]int{}
	pended := false
	catchUp := r.catchUp.Load()
	defer func() {
		// Done unless the pass failed (retry next tick) or moved a full
		// batch (more to rebuild: Run ticks again at once).
		n := moved["requeue_failed_and_pending"]
		if catchUp && n >= 0 && n < r.Max {
			r.catchUp.Store(false)
		}
		r.rebuildMore.Store(catchUp && n >= r.Max)
	}()
	for _, p := range r.passes(rng, withOrphans, catchUp) {
		pctx, cancel := context.WithTimeout(ctx, r.PassTimeout)
		n, err := p.run(pctx)
		// A pass that ran past its own deadline is a runaway statement,
		// not the database gone: reported as the outage, it was logged as
		// one and its end set off a catch-up no crash called for.
		runaway := err != nil && ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded)
		cancel()
		moved[p.name] = n
		if err == nil {
			r.Outage.Succeeded()
		}
		switch {
		case err != nil && ctx.Err() == nil && !runaway && r.Outage.Failed("reaper", err):
			moved[p.name] = -1
		case runaway:
			moved[p.name] = -1
			r.Log.Error().Err(err).Str("pass", p.name).Dur("pass_timeout", r.PassTimeout).
				Int("shard_lo", rng.Lo).Int("shard_hi", rng.Last()).Msg("reaper pass ran past its timeout")
		case err != nil && ctx.Err() == nil:
			moved[p.name] = -1
			r.Log.Error().Err(err).Str("pass", p.name).Int("shard_lo", rng.Lo).Int("shard_hi", rng.Last()).
				Msg("reaper pass failed")
		case n > 0:
			pended = pended || pendingPasses[p.name]
			r.Log.Debug().Str("pass", p.name).Int("rows", n).Int("shard_lo", rng.Lo).Int("shard_hi", rng.Last()).
				Msg("reaper pass")
		}
	}
	if pended {
		if err := r.Maintenance.NotifyWorkReady(ctx); err != nil && ctx.Err() == nil && !r.Outage.Failed("reaper", err) {
			r.Log.Warn().Err(err).Msg("work_ready notify failed; dispatchers fall back to their poll")
		}
		r.TestSignals.NotifiedWorkReady.Signal(struct{}{})
	}
	r.TestSignals.Ticked.Signal(moved)
}

// reaperPass is one named pass of a tick.
type reaperPass struct {
	name string
	run  func(ctx context.Context) (int, error)
}

// passes lists a tick's passes over rng, in order.
func (r *Reaper) passes(rng shard.Range, withOrphans, catchUp bool) []reaperPass {
	m := r.Maintenance
	retryAfter := r.RetryAfter
	if catchUp {
		retryAfter = 0
	}
	passes := []reaperPass{
		{"reap_stale_work", func(ctx context.Context) (int, error) { return m.ReapStaleWork(ctx, rng, r.StaleAfter) }},
		{"requeue_failed_and_pending", func(ctx context.Context) (int, error) {
			return m.RequeueFailedAndPending(ctx, rng, r.Max, retryAfter)
		}},
		{"rewalk_rollups", func(ctx context.Context) (int, error) {
			w, err := m.RewalkRollups(ctx, rng, r.Max)
			if err != nil {
				return 0, err
			}
			r.logRewalk(w, rng)
			return w.Pended, nil
		}},
		{"delete_unclaimed_work", func(ctx context.Context) (int, error) { return m.DeleteUnclaimedWork(ctx, rng, r.UnclaimedAfter) }},
		{"sweep_deletable", func(ctx context.Context) (int, error) { return m.SweepDeletable(ctx, rng, r.Max) }},
		{"recount_inflight", func(ctx context.Context) (int, error) { return m.RecountInflight(ctx, rng) }},
		{"reap_stale_lifecycle", func(ctx context.Context) (int, error) { return m.ReapStaleLifecycle(ctx, rng, r.LifecycleStale) }},
	}
	if withOrphans {
		passes = append(passes, reaperPass{"sweep_expired_orphans", func(ctx context.Context) (int, error) {
			return m.SweepExpiredOrphans(ctx, rng, r.Max)
		}}, reaperPass{"sweep_pruned_configs", func(ctx context.Context) (int, error) {
			return m.SweepPrunedConfigs(ctx, r.Max)
		}})
	}
	return passes
}

// logRewalk logs a crash rewalk's start and end, each once: the database
// makes exactly one call of a walk its starter and one its finisher.
func (r *Reaper) logRewalk(w maintenance.Rewalk, rng shard.Range) {
	if w.Started {
		r.Log.Warn().Time("since", w.Since).Int("shard_lo", rng.Lo).Int("shard_hi", rng.Last()).
			Int("walked", w.Walked).Int("pended", w.Pended).
			Msg("crash restart of the database detected (the UNLOGGED queue came back empty): re-pending every composite's rollup")
	}
	if w.Finished {
		r.Log.Info().Time("since", w.Since).Dur("took", clockOr(r.Clock).Now().Sub(w.Since)).
			Int64("owners_walked", w.WalkedTotal).Int64("rollups_pended", w.PendedTotal).
			Msg("crash rewalk of the composites' rollups finished")
	}
}
