// Package engine runs a pod's duties. A pod is not a role: it is a set of
// duties (the control bundle, the broker), resolved from ROLE and run side by
// side by one Engine. A duty handles its own transient errors; one that
// returns an error stops the engine (crash-only: the orchestrator restarts
// the pod).
package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rs/zerolog"
)

// Duty is one long-running part of a pod.
type Duty interface {
	// Name identifies the duty in logs.
	Name() string
	// Run works until ctx ends (returning nil) or a fatal error.
	Run(ctx context.Context) error
}

// Func adapts a function to a Duty.
type Func struct {
	N string
	F func(ctx context.Context) error
}

// Name implements Duty.
func (f Func) Name() string { return f.N }

// Run implements Duty.
func (f Func) Run(ctx context.Context) error { return f.F(ctx) }

// Engine runs duties together.
type Engine struct {
	log     zerolog.Logger
	duties  []Duty
	onFatal func(error)
}

// New returns an engine over duties.
func New(log zerolog.Logger, duties ...Duty) *Engine {
	return &Engine{log: log, duties: duties}
}

// Add appends duties before Run.
func (e *Engine) Add(d ...Duty) { e.duties = append(e.duties, d...) }

// OnFatal sets f, called once before Run, with the first fatal error, as
// the engine starts stopping the other duties: the process's shutdown can
// begin there, as it does on a signal, not only once every duty has
// drained. f must not block.
func (e *Engine) OnFatal(f func(error)) { e.onFatal = f }

// Run starts every duty and waits for all of them. When ctx ends each duty
// drains on its own terms; when one fails the others are cancelled (after
// OnFatal's f) and the first error is returned.
func (e *Engine) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for _, d := range e.duties {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.log.Debug().Str("duty", d.Name()).Msg("duty started")
			err := d.Run(ctx)
			if err != nil && !errors.Is(err, context.Canceled) {
				once.Do(func() {
					first = fmt.Errorf("duty %s: %w", d.Name(), err)
					if e.onFatal != nil {
						e.onFatal(first)
					}
				})
				cancel()
				return
			}
			e.log.Debug().Str("duty", d.Name()).Msg("duty stopped")
		}()
	}
	wg.Wait()
	return first
}
