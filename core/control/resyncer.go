package control

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/kinds"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/core/testsignal"
)

// ResyncStore is the maintenance pass the resyncer runs.
type ResyncStore interface {
	RequeueForResync(ctx context.Context, p maintenance.Resync, r shard.Range, limit int) (int, error)
	// NotifyWorkReady sends work_ready in a statement of its own.
	NotifyWorkReady(ctx context.Context) error
}

// KindSnapshots is the live view of the applied kinds (a *kinds.Cache).
type KindSnapshots interface {
	Snapshot() *kinds.Snapshot
}

// Resyncer re-pends settled resources of every kind whose live kind_config
// opts into drift resync (resync_interval_secs > 0), so providers re-observe
// health. The policy is read from the kind cache on every tick: enabling,
// re-tuning or disabling resync is live, and a fleet with no resync kind does
// no database work at all.
type Resyncer struct {
	Maintenance ResyncStore
	Kinds       KindSnapshots
	Shards      *cluster.ShardSet
	Log         zerolog.Logger
	// Outage is the process's shared database-outage reporter (nil: errors
	// are logged).
	Outage *engine.Outage
	Clock  engine.Clock  // nil: the wall clock
	Every  time.Duration // default 5s
	Max    int           // per kind per tick (default 1000)

	TestSignals ResyncerTestSignals
}

// ResyncerTestSignals report the resyncer's progress to tests.
type ResyncerTestSignals struct {
	// Ticked carries the number of kinds a tick ran a resync pass for.
	Ticked testsignal.Signal[int]
}

// Init arms every signal.
func (ts *ResyncerTestSignals) Init() { ts.Ticked.Init() }

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
	return tickEvery(ctx, clockOr(r.Clock), r.Every, r.tick)
}

// tick runs one resync pass per opted-in kind over the owned range.
func (r *Resyncer) tick(ctx context.Context) {
	passes, pended := 0, 0
	defer func() { r.TestSignals.Ticked.Signal(passes) }()
	rng := r.Shards.Span()
	if rng.Empty() {
		return
	}
	for _, k := range r.Kinds.Snapshot().All() {
		if k.Config.ResyncIntervalSecs <= 0 || k.IsReactor {
			continue
		}
		p := maintenance.Resync{Kind: k.Name, Version: k.Version,
			Interval: time.Duration(k.Config.ResyncIntervalSecs) * time.Second, Recompose: k.Config.ResyncRecomposes}
		passes++
		n, err := r.Maintenance.RequeueForResync(ctx, p, rng, r.Max)
		if err == nil {
			r.Outage.Succeeded()
		}
		if err != nil && ctx.Err() == nil && !r.Outage.Failed("resyncer", err) {
			r.Log.Error().Err(err).Str("kind", k.Name).Stringer("shards", rng).Msg("resync pass failed")
		}
		pended += n
	}
	if pended > 0 { // announced after the passes committed (see Reaper.Tick)
		if err := r.Maintenance.NotifyWorkReady(ctx); err != nil && ctx.Err() == nil && !r.Outage.Failed("resyncer", err) {
			r.Log.Warn().Err(err).Msg("work_ready notify failed; dispatchers fall back to their poll")
		}
	}
}
