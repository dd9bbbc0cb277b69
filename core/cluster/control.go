package cluster

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/store/notify"
)

// ControlReader reads the action an admin requested on a member's own row.
type ControlReader interface {
	PendingRequest(ctx context.Context, id string) (membership.Request, error)
}

// DefaultControlEvery is how often a member reads its own row for a drain
// or kill request, on top of the cluster_changed wake the request sends.
const DefaultControlEvery = time.Second

// ControlWatcher acts on the drain and kill requests an admin records on
// this member's row (membership.RequestControl; there is no other control
// channel). It wakes on cluster_changed, which every request sends ungated,
// and reads the row every Every as the failsafe, so a member acts within
// about a second. A drain calls OnDrain once (the host shuts down
// gracefully, as on SIGTERM); a kill calls OnKill (the host exits at once).
// The host runs it outside the duties it drains, so a kill still lands
// while a drain is under way (an operator escalating a stuck drain).
type ControlWatcher struct {
	Registry ControlReader
	ID       string
	Listener *notify.Listener // nil: poll only
	Every    time.Duration    // default DefaultControlEvery
	OnDrain  func(membership.Request)
	OnKill   func(membership.Request)
	Log      zerolog.Logger
	Clock    engine.Clock // nil: the wall clock

	drained bool
	failing bool
}

// Run watches until ctx ends or a kill was acted on.
func (w *ControlWatcher) Run(ctx context.Context) {
	if w.Every <= 0 {
		w.Every = DefaultControlEvery
	}
	clock := clockOf(w.Clock)
	wake, stop := clusterWakes(w.Listener)
	defer stop()
	for {
		if w.check(ctx) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-clock.After(w.Every):
		}
	}
}

// check reads the row once and acts; it reports whether a kill was acted on.
func (w *ControlWatcher) check(ctx context.Context) bool {
	r, err := w.Registry.PendingRequest(ctx, w.ID)
	switch {
	case err != nil:
		if ctx.Err() == nil && !w.failing {
			w.failing = true
			w.Log.Warn().Err(err).Str("member_id", w.ID).Msg("reading this member's drain/kill requests failed; retrying quietly")
		}
		return false
	case w.failing:
		w.failing = false
		w.Log.Info().Str("member_id", w.ID).Msg("reading this member's drain/kill requests succeeds again")
	}
	switch r.Action {
	case membership.ActionKill:
		w.Log.Warn().Str("member_id", w.ID).Str("actor", r.By).Time("requested_at", deref(r.At)).
			Msg("kill requested: exiting now without draining, as a crash would; peers reclaim this member's work")
		if w.OnKill != nil {
			w.OnKill(r)
		}
		return true
	case membership.ActionDrain:
		if w.drained {
			return false
		}
		w.drained = true
		if r.By == membership.ActorSelf {
			// The member's own shutdown marked it (membership.Store.Leave):
			// the host is draining already and said so.
			if w.OnDrain != nil {
				w.OnDrain(r)
			}
			return false
		}
		w.Log.Warn().Str("member_id", w.ID).Str("actor", r.By).Time("requested_at", deref(r.At)).
			Msg("drain requested: stopped claiming; finishing in-flight work within the drain budget, then leaving")
		if w.OnDrain != nil {
			w.OnDrain(r)
		}
	}
	return false
}

func deref(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
