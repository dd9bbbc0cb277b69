package control

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/kinds"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/core/store/membership"
)

// Resyncer re-pends settled resources of every kind whose live kind_config
// opts into drift resync (resync_interval_secs > 0), so providers re-observe
// health. The policy is read from the kind cache on every tick: enabling,
// re-tuning or disabling resync is live, and a fleet with no resync kind does
// no database work at all.
type Resyncer struct {
	Maintenance *maintenance.Store
	Kinds       *kinds.Cache
	Shards      *cluster.ShardSet
	Log         zerolog.Logger
	Every       time.Duration // default 5s
	Max         int           // per kind per tick (default 1000)
}

// Name implements engine.Duty.
func (r *Resyncer) Name() string { return "resyncer" }

// Run ticks until ctx ends.
func (r *Resyncer) Run(ctx context.Context) error {
	if r.Every <= 0 {
		r.Every = 5 * time.Second
	}
	if r.Max <= 0 {
		r.Max = 1000
	}
	for {
		if lo, hi, ok := r.Shards.Bounds(); ok {
			for _, k := range r.Kinds.Snapshot().All() {
				if k.Config.ResyncIntervalSecs <= 0 || k.IsReactor {
					continue
				}
				p := maintenance.Resync{Kind: k.Name, Version: k.Version,
					Interval: time.Duration(k.Config.ResyncIntervalSecs) * time.Second, Recompose: k.Config.ResyncRecomposes}
				if _, err := r.Maintenance.RequeueForResync(ctx, p, shard.Between(lo, hi), r.Max); err != nil && ctx.Err() == nil {
					r.Log.Error().Err(err).Str("kind", k.Name).Msg("resync pass failed")
				}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(r.Every):
		}
	}
}

// MemberGC hard-deletes cluster members whose heartbeat is older than the
// TTL (crashed, or their deregister timed out). UI/history cleanup only:
// routing already dropped them after the liveness window.
type MemberGC struct {
	Members *membership.Store
	TTL     time.Duration // default 5m
	Every   time.Duration // default 1m
	Log     zerolog.Logger
}

// Name implements engine.Duty.
func (g *MemberGC) Name() string { return "member-gc" }

// Run ticks until ctx ends.
func (g *MemberGC) Run(ctx context.Context) error {
	if g.TTL <= 0 {
		g.TTL = membership.DefaultGCTTL
	}
	if g.Every <= 0 {
		g.Every = time.Minute
	}
	for {
		if n, err := g.Members.GCStale(ctx, g.TTL); err != nil && ctx.Err() == nil {
			g.Log.Error().Err(err).Msg("member gc failed")
		} else if n > 0 {
			g.Log.Info().Int("removed", n).Msg("garbage-collected stale cluster members")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(g.Every):
		}
	}
}

// CountFolder folds the phase-count delta log into resource_phase_counts so
// counts stay a handful of rows to sum (one folder cluster-wide at a time,
// by advisory lock).
type CountFolder struct {
	Fold  func(ctx context.Context) (int, error)
	Every time.Duration // default 1s
	Log   zerolog.Logger
}

// Name implements engine.Duty.
func (f *CountFolder) Name() string { return "count-folder" }

// Run folds until ctx ends.
func (f *CountFolder) Run(ctx context.Context) error {
	if f.Every <= 0 {
		f.Every = time.Second
	}
	for {
		if _, err := f.Fold(ctx); err != nil && ctx.Err() == nil {
			f.Log.Error().Err(err).Msg("fold phase counts failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(f.Every):
		}
	}
}
