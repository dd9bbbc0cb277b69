package cluster

import (
	"context"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/store/notify"
)

// Reactor reacts to a membership change (a join, a leave, or the failsafe
// poll noticing a crashed member's heartbeat lapse).
type Reactor interface {
	Name() string
	React(ctx context.Context) error
}

// TopologyWatcher LISTENs on cluster_changed once per pod and, on every wake
// and every failsafe Poll, runs its reactors (the resharder; on a broker, the
// mesh). Both read live membership through the same liveness window, so
// shard tiling and routing never disagree on who is alive.
type TopologyWatcher struct {
	Listener *notify.Listener
	Reactors []Reactor
	// Poll is the failsafe re-read cadence (a crash fires no NOTIFY).
	Poll   time.Duration
	Log    zerolog.Logger
	Clock  engine.Clock   // nil: the wall clock
	Outage *engine.Outage // nil: a failed reaction is logged

	kickOnce sync.Once
	kick     chan struct{}
}

// Name implements engine.Duty.
func (w *TopologyWatcher) Name() string { return "topology-watcher" }

func (w *TopologyWatcher) kicks() chan struct{} {
	w.kickOnce.Do(func() { w.kick = make(chan struct{}, 1) })
	return w.kick
}

// Kick runs the reactors now (for instance once the liveness lock is held
// again), without waiting for a wake or the poll.
func (w *TopologyWatcher) Kick() {
	select {
	case w.kicks() <- struct{}{}:
	default:
	}
}

// Run reacts until ctx ends.
func (w *TopologyWatcher) Run(ctx context.Context) error {
	if w.Poll <= 0 {
		w.Poll = 10 * time.Second
	}
	clock := clockOf(w.Clock)
	wake, stop := clusterWakes(w.Listener)
	defer stop()
	var backoff engine.Backoff
	// failing marks the reactors whose failure was logged: a reaction is
	// retried up to a second apart, and is logged once until it succeeds.
	failing := make([]bool, len(w.Reactors))
	for {
		failed := false
		for i, r := range w.Reactors {
			err := r.React(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				failed = true
				if !w.Outage.Failed("topology", err) && !failing[i] {
					failing[i] = true
					w.Log.Warn().Err(err).Str("reactor", r.Name()).
						Msg("topology reaction failed; retrying quietly with backoff until it succeeds")
				}
			case err == nil && failing[i]:
				failing[i] = false
				w.Log.Info().Str("reactor", r.Name()).Msg("topology reaction succeeds again")
			}
		}
		// A failed reaction left this member's view stale, and the wakes
		// that would correct it may already have come and gone (members
		// re-registering together after a database restart wake once each):
		// retry with backoff rather than wait for the next wake or the poll.
		next := w.Poll
		if failed {
			next = backoff.Next()
		} else {
			backoff = engine.Backoff{}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-w.kicks():
		case <-clock.After(next):
		}
	}
}

// clusterWakes subscribes to cluster_changed on l; a nil listener never
// wakes (its caller's poll carries it). stop ends the subscription.
func clusterWakes(l *notify.Listener) (<-chan notify.Event, func()) {
	if l == nil {
		return nil, func() {}
	}
	sub := l.Subscribe("cluster_changed", 1)
	return sub.C, sub.Close
}

// Resharder asks the database for this pod's range among the live members of
// its role and swaps the ShardSet.
type Resharder struct {
	Registry Registry
	MemberID string
	Shards   *ShardSet
	Liveness time.Duration
	// OnChange runs after the range changed (e.g. Reporter.Kick).
	OnChange func()
	// Held gates claiming on the liveness lock (nil: always held): while it
	// reports false the range is empty without asking the database.
	Held func() bool
	Log  zerolog.Logger
}

// Name implements Reactor.
func (r *Resharder) Name() string { return "resharder" }

// React re-tiles.
func (r *Resharder) React(ctx context.Context) error {
	live := r.Liveness
	if live <= 0 {
		live = membership.DefaultLiveness
	}
	held := r.Held
	if held == nil {
		held = func() bool { return true }
	}
	var span shard.Range
	if held() {
		var err error
		if span, err = r.Registry.AssignShards(ctx, r.MemberID, membership.DefaultTotalShards, live); err != nil {
			return err
		}
	}
	// Held is asked again at the swap: the lock may have been lost while the
	// assignment was read, and its OnLost has emptied the range already —
	// a plain swap here would hand the range back to a member that must not
	// claim.
	if r.Shards.SetIf(span, held) {
		ev := r.Log.Info().Str("member_id", r.MemberID).Bool("empty", span.Empty())
		if !span.Empty() {
			ev = ev.Int("shard_lo", span.Lo).Int("shard_hi", span.Last())
		}
		ev.Msg("shard range re-tiled")
		if r.OnChange != nil {
			r.OnChange()
		}
	}
	return nil
}
