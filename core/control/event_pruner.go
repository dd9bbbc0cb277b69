package control

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/testsignal"
)

// Event pruning's defaults.
const (
	DefaultEventPruneEvery = time.Minute
	DefaultEventPruneBatch = 5000
	// DefaultEventPruneBatches bounds one tick: 20 batches of 5,000 a minute
	// keep up with far more events than any install writes, and a backlog
	// (retention shortened, or pruning long off) is worked off over several
	// ticks instead of in one long burst of deletes.
	DefaultEventPruneBatches = 20
)

// EventPruner deletes resource events older than the retention
// (EVENT_RETENTION), oldest first, so the event log — written by composes,
// failures, rollups and operators' actions — stays bounded by its rate
// times the retention instead of growing for the life of the install.
// Every control pod runs it; concurrent passes share the work (PruneEvents).
type EventPruner struct {
	// Prune deletes the oldest events created before the cutoff, at most
	// limit, and returns how many (maintenance.Store.PruneEvents).
	Prune func(ctx context.Context, before time.Time, limit int) (int, error)
	// Retention is how long an event is kept; 0 keeps events forever (the
	// duty ends at once).
	Retention time.Duration
	Every     time.Duration // default DefaultEventPruneEvery
	Batch     int           // default DefaultEventPruneBatch
	Batches   int           // batches a tick at most; default DefaultEventPruneBatches
	Clock     engine.Clock  // nil: the wall clock
	Log       zerolog.Logger
	// Outage is the process's shared database-outage reporter (nil: errors
	// are logged).
	Outage *engine.Outage

	TestSignals EventPrunerTestSignals
}

// EventPrunerTestSignals report the pruner's progress to tests.
type EventPrunerTestSignals struct {
	// Pruned carries the events one tick deleted (what it deleted before an
	// error, on one).
	Pruned testsignal.Signal[int]
}

// Init arms every signal.
func (ts *EventPrunerTestSignals) Init() { ts.Pruned.Init() }

// Name implements engine.Duty.
func (p *EventPruner) Name() string { return "event-pruner" }

// Run prunes every tick until ctx ends; with no retention it returns at once.
func (p *EventPruner) Run(ctx context.Context) error {
	if p.Retention <= 0 {
		return nil
	}
	if p.Every <= 0 {
		p.Every = DefaultEventPruneEvery
	}
	if p.Batch <= 0 {
		p.Batch = DefaultEventPruneBatch
	}
	if p.Batches <= 0 {
		p.Batches = DefaultEventPruneBatches
	}
	clock := clockOr(p.Clock)
	return tickEvery(ctx, clock, p.Every, func(ctx context.Context) { p.prune(ctx, clock.Now().Add(-p.Retention)) })
}

// prune deletes the events created before cutoff, a batch at a time, until a
// batch comes back short or the tick's batches are spent.
func (p *EventPruner) prune(ctx context.Context, cutoff time.Time) {
	total := 0
	for range p.Batches {
		n, err := p.Prune(ctx, cutoff, p.Batch)
		total += n
		if err != nil {
			if ctx.Err() == nil && !p.Outage.Failed("event-pruner", err) {
				p.Log.Error().Err(err).Int("deleted", total).Msg("prune resource events failed")
			}
			p.TestSignals.Pruned.Signal(total)
			return
		}
		p.Outage.Succeeded()
		if n < p.Batch {
			break
		}
	}
	if total > 0 {
		p.Log.Info().Int("deleted", total).Time("before", cutoff).Msg("pruned resource events past their retention")
	}
	p.TestSignals.Pruned.Signal(total)
}
