package control

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/testsignal"
)

// StatisticsGuard re-analyzes the fleet's tables whose statistics size
// them far under the rows they hold: a table analyzed while a teardown left
// it empty and filled again by the next fleet, which Postgres sizes at zero
// rows until its next ANALYZE (autovacuum's can come minutes later, its
// workers busy with the teardown's dead rows). The hot statements' plans do
// not depend on those statistics; the guard shortens the window for any
// other. Each tick is a read of the catalog, and an ANALYZE only of a table
// found undersized and not locked by another session — autovacuum's pass,
// which waiting would cancel (one member at a time, by advisory lock).
type StatisticsGuard struct {
	// Analyze analyzes the undersized tables and returns their names
	// (store.Store.AnalyzeUndersized with store.UndersizedMinRows).
	Analyze func(ctx context.Context) ([]string, error)
	Every   time.Duration // default 10s
	Clock   engine.Clock  // nil: the wall clock
	Log     zerolog.Logger
	// Outage is the process's shared database-outage reporter (nil: errors
	// are logged).
	Outage *engine.Outage

	TestSignals StatisticsGuardTestSignals
}

// StatisticsGuardTestSignals report the guard's progress to tests.
type StatisticsGuardTestSignals struct {
	// Analyzed carries the tables one tick analyzed (none on an error).
	Analyzed testsignal.Signal[[]string]
}

// Init arms every signal.
func (ts *StatisticsGuardTestSignals) Init() { ts.Analyzed.Init() }

// Name implements engine.Duty.
func (g *StatisticsGuard) Name() string { return "statistics-guard" }

// Run ticks until ctx ends.
func (g *StatisticsGuard) Run(ctx context.Context) error {
	if g.Every <= 0 {
		g.Every = 10 * time.Second
	}
	return tickEvery(ctx, clockOr(g.Clock), g.Every, g.check)
}

func (g *StatisticsGuard) check(ctx context.Context) {
	tables, err := g.Analyze(ctx)
	switch {
	case err != nil && ctx.Err() == nil && g.Outage.Failed("statistics-guard", err):
	case err != nil && ctx.Err() == nil:
		g.Log.Error().Err(err).Msg("analyze undersized tables failed")
	case err == nil:
		g.Outage.Succeeded()
		if len(tables) > 0 {
			g.Log.Info().Strs("tables", tables).
				Msg("analyzed tables whose statistics sized them at under a tenth of their rows")
		}
	}
	g.TestSignals.Analyzed.Signal(tables)
}
