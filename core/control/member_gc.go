package control

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/testsignal"
)

// StaleMembers deletes cluster members whose heartbeat is older than a TTL.
type StaleMembers interface {
	GCStale(ctx context.Context, ttl time.Duration) (int, error)
}

// MemberGC hard-deletes cluster members whose heartbeat is older than the
// TTL (crashed, or their deregister timed out). UI/history cleanup only:
// routing already dropped them after the liveness window.
type MemberGC struct {
	Members StaleMembers
	TTL     time.Duration // default 5m
	Every   time.Duration // default 1m
	Clock   engine.Clock  // nil: the wall clock
	Log     zerolog.Logger
	// Outage is the process's shared database-outage reporter (nil: errors
	// are logged).
	Outage *engine.Outage

	TestSignals MemberGCTestSignals
}

// MemberGCTestSignals report the GC's progress to tests.
type MemberGCTestSignals struct {
	// Collected carries the members one pass removed (0 on an error).
	Collected testsignal.Signal[int]
}

// Init arms every signal.
func (ts *MemberGCTestSignals) Init() { ts.Collected.Init() }

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
	return tickEvery(ctx, clockOr(g.Clock), g.Every, g.collect)
}

func (g *MemberGC) collect(ctx context.Context) {
	n, err := g.Members.GCStale(ctx, g.TTL)
	switch {
	case err != nil && ctx.Err() == nil && g.Outage.Failed("member-gc", err):
	case err != nil && ctx.Err() == nil:
		g.Log.Error().Err(err).Msg("member gc failed")
	case n > 0:
		g.Log.Info().Int("removed", n).Msg("garbage-collected stale cluster members")
	}
	g.TestSignals.Collected.Signal(n)
}
