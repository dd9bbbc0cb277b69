// Package control is the control bundle of a pod, one service per file: the
// drainer that applies worker results from the outbox (drainer.go), the
// reaper's backstop passes (reaper.go), the drift resyncer (resyncer.go),
// the cluster-member GC (member_gc.go), the phase-count folder
// (count_folder.go) and the event pruner (event_pruner.go). Each sweeper works only on this pod's shard range (read
// lock-free from the ShardSet on every tick) and is idempotent, so control
// pods need no leader.
//
// Every service is a struct of its dependencies behind narrow interfaces, a
// logger and an engine.Clock (nil is the wall clock), run by Run(ctx) as an
// engine.Duty; its TestSignals report where it got to when a test calls
// Init on them (no-ops in production).
package control

import (
	"context"
	"time"

	"github.com/converge-run/converge/core/engine"
)

// clockOr is c, or the wall clock when c is nil.
func clockOr(c engine.Clock) engine.Clock {
	if c == nil {
		return engine.RealClock
	}
	return c
}

// tickEvery runs fn, then waits every on clock, until ctx ends.
func tickEvery(ctx context.Context, clock engine.Clock, every time.Duration, fn func(ctx context.Context)) error {
	for {
		fn(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-clock.After(every):
		}
	}
}
