package control

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/testsignal"
)

// CountFolder folds the phase-count delta log into resource_phase_counts so
// counts stay a handful of rows to sum (one folder cluster-wide at a time,
// by advisory lock).
type CountFolder struct {
	// Fold runs one fold and returns the delta rows it folded
	// (store.Store.FoldPhaseCounts).
	Fold  func(ctx context.Context) (int, error)
	Every time.Duration // default 1s
	Clock engine.Clock  // nil: the wall clock
	Log   zerolog.Logger
	// Outage is the process's shared database-outage reporter (nil: errors
	// are logged).
	Outage *engine.Outage

	TestSignals CountFolderTestSignals
}

// CountFolderTestSignals report the folder's progress to tests.
type CountFolderTestSignals struct {
	// Folded carries the rows one fold folded (0 on an error).
	Folded testsignal.Signal[int]
}

// Init arms every signal.
func (ts *CountFolderTestSignals) Init() { ts.Folded.Init() }

// Name implements engine.Duty.
func (f *CountFolder) Name() string { return "count-folder" }

// Run folds until ctx ends.
func (f *CountFolder) Run(ctx context.Context) error {
	if f.Every <= 0 {
		f.Every = time.Second
	}
	return tickEvery(ctx, clockOr(f.Clock), f.Every, f.fold)
}

func (f *CountFolder) fold(ctx context.Context) {
	n, err := f.Fold(ctx)
	if err == nil {
		f.Outage.Succeeded()
	}
	if err != nil && ctx.Err() == nil && !f.Outage.Failed("count-folder", err) {
		f.Log.Error().Err(err).Msg("fold phase counts failed")
	}
	f.TestSignals.Folded.Signal(n)
}
