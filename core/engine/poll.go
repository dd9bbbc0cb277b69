package engine

import (
	"context"
	"time"

	"github.com/rs/zerolog"
)

// Clock is the time source of a loop (injectable in tests).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// RealClock is the wall clock.
var RealClock Clock = realClock{}

// PollLoop calls Step repeatedly with adaptive backoff: while Step reports
// work done it runs again at once; when idle it waits, doubling from Min up to
// Max, and any Wake resets the wait. A failing Step is retried with jittered
// backoff (Backoff: 100 ms doubling to 1 s; a Postgres blip must not kill a
// sweeper, and an outage must not spin it), which a Wake does not cut
// short; an unreachable database is
// reported to Outage (logged once per process), any other error is logged
// when the failures begin and once more when a step succeeds again.
type PollLoop struct {
	Name string
	// Step does one unit of work and reports whether there was any.
	Step func(ctx context.Context) (busy bool, err error)
	// Wake cuts an idle wait short (a LISTEN hint); may be nil.
	Wake     <-chan struct{}
	Min, Max time.Duration
	Clock    Clock
	Log      zerolog.Logger
	Outage   *Outage // nil: every error is logged
}

// Run loops until ctx ends.
func (p *PollLoop) Run(ctx context.Context) error {
	clock := p.Clock
	if clock == nil {
		clock = RealClock
	}
	if p.Min <= 0 {
		p.Min = 10 * time.Millisecond
	}
	if p.Max < p.Min {
		p.Max = p.Min
	}
	wait := p.Min
	var retry Backoff
	failures := 0 // steps failed in a row with errors of their own
	for {
		busy, err := p.Step(ctx)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // shut down: a step cut short by the cancel is no failure
		}
		switch {
		case err != nil:
			if !p.Outage.Failed(p.Name, err) {
				if failures == 0 {
					p.Log.Error().Err(err).Str("loop", p.Name).Msg("step failed; retrying quietly until a step succeeds")
				}
				failures++
			}
			wait = retry.Next()
		default:
			if failures > 0 {
				p.Log.Info().Str("loop", p.Name).Int("failures", failures).Msg("step succeeds again")
				failures = 0
			}
			retry.Reset()
			p.Outage.Succeeded()
		}
		switch {
		case err != nil:
		case busy:
			wait = p.Min
			continue
		}
		wake := p.Wake
		if err != nil {
			// A failing step waits its backoff out: a wake says there is
			// work, not that the step would succeed, and wakes can come far
			// faster than a retry should (the drainer's, one per result).
			wake = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
			wait = p.Min
		case <-clock.After(wait):
			if err == nil {
				wait = min(wait*2, p.Max)
			}
		}
	}
}
