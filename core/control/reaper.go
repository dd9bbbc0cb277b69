package control

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
)

// Reaper runs the backstop passes over this pod's shard range every tick:
// stale leases, crash catch-up, abandoned-work GC, the delete sweep, the
// concurrency-cap recount, stale lifecycle claims, and (every OrphanEvery-th
// tick: the deadline is absolute, a coarse cadence keeps even the idle probe
// off most ticks) the orphan-grace sweep.
type Reaper struct {
	Maintenance *maintenance.Store
	Shards      *cluster.ShardSet
	Log         zerolog.Logger

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

// Run ticks until ctx ends.
func (r *Reaper) Run(ctx context.Context) error {
	r.defaults()
	for tick := 0; ; tick++ {
		r.Tick(ctx, tick%r.OrphanEvery == 0)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.Every):
		}
	}
}

// Tick runs every pass once (orphans too when withOrphans).
func (r *Reaper) Tick(ctx context.Context, withOrphans bool) {
	r.defaults()
	lo, hi, ok := r.Shards.Bounds()
	if !ok {
		return
	}
	rng := shard.Between(lo, hi)
	m := r.Maintenance
	type pass struct {
		name string
		run  func(ctx context.Context) (int, error)
	}
	passes := []pass{
		{"reap_stale_work", func(ctx context.Context) (int, error) { return m.ReapStaleWork(ctx, rng, r.StaleAfter) }},
		{"requeue_failed_and_pending", func(ctx context.Context) (int, error) {
			return m.RequeueFailedAndPending(ctx, rng, r.Max, r.RetryAfter)
		}},
		{"delete_unclaimed_work", func(ctx context.Context) (int, error) { return m.DeleteUnclaimedWork(ctx, rng, r.UnclaimedAfter) }},
		{"sweep_deletable", func(ctx context.Context) (int, error) { return m.SweepDeletable(ctx, rng, r.Max) }},
		{"recount_inflight", func(ctx context.Context) (int, error) { return m.RecountInflight(ctx, rng) }},
		{"reap_stale_lifecycle", func(ctx context.Context) (int, error) { return m.ReapStaleLifecycle(ctx, rng, r.LifecycleStale) }},
	}
	if withOrphans {
		passes = append(passes, pass{"sweep_expired_orphans", func(ctx context.Context) (int, error) {
			return m.SweepExpiredOrphans(ctx, rng, r.Max)
		}})
	}
	for _, p := range passes {
		pctx, cancel := context.WithTimeout(ctx, r.PassTimeout)
		n, err := p.run(pctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			r.Log.Error().Err(err).Str("pass", p.name).Int("shard_lo", lo).Int("shard_hi", hi).Msg("reaper pass failed")
		case n > 0:
			r.Log.Debug().Str("pass", p.name).Int("rows", n).Int("shard_lo", lo).Int("shard_hi", hi).Msg("reaper pass")
		}
	}
}
