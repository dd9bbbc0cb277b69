package broker

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
)

// The spread. Workers dial whichever broker their load balancer picks and
// keep that session, so after a broker crashes or rolls its workers bunch on
// the brokers that were up, and a broker that joins gets none (in the chaos
// suite's stack, five crashes, each replaced, left one broker with three of
// the four workers and the newest with none). Every broker still claims its
// own shards and runs their stages on its own workers, or relays them to its
// peers': a broker with many workers carries their traffic and its peers'
// relays, and one with few waits on them. WORKER_SESSION_MAX_AGE spreads
// them again, but only over its 30 minutes.
//
// So a broker that serves more than its share of the workers — the cluster's
// workers, as the brokers' membership rows report them, over the live
// brokers, rounded up — ends the sessions above it (the ones running the
// fewest stages, once those stages finish: a planned end, as for the age),
// and those workers reconnect through the balancer, to any broker. Each
// broker's row carries its number of workers, and a change of it is beaten
// at once and wakes the peers (cluster_changed), so the counts are fresh
// within a round trip. A broker sheds at most once per spreadCooldown: long
// enough for the shed workers to reconnect and the counts to show where they
// went, so it never sheds on a count that has not caught up. A worker may
// land on the broker it left (the balancer picks); it is shed again after
// the cooldown, and the spread converges in a few rounds.

// spreadCooldown is the least time between two sheds of one broker;
// spreadSettle is how long an excess must last before it is shed: the peers'
// rows of a moment ago may not show a worker that has just moved (every
// broker's first beats, a burst of reconnects after a crash).
const (
	spreadCooldown = 5 * time.Second
	spreadSettle   = time.Second
)

// excessWorkers is how many of its own workers a broker should shed, given
// the numbers its live peers report: what it holds above its share (the
// total over the brokers, rounded up), and never so many that it would end
// up with fewer than the emptiest peer after they move there.
func excessWorkers(own int, peers []int) int {
	if len(peers) == 0 || own <= 1 {
		return 0
	}
	total, fewest := own, own
	for _, n := range peers {
		total += n
		fewest = min(fewest, n)
	}
	brokers := len(peers) + 1
	share := (total + brokers - 1) / brokers
	return max(0, min(own-share, (own-fewest)/2))
}

// spreader sheds the sessions above this broker's share of the workers
// whenever the routes change (a worker joined or left here, or the peers'
// rows changed) and the excess has lasted a settle, at most once per
// cooldown.
type spreader struct {
	reg   *registry
	peers func() []int // the live peers' reported workers
	clock engine.Clock
	log   zerolog.Logger
	// cooldown is the least time between two sheds, settle how long an
	// excess must last before it is shed; pace spaces the looks at the
	// routes (a burst of reconnects is one look).
	cooldown, settle, pace time.Duration
	// looked, when set, is told each look's excess (tests).
	looked func(excess int)
}

// Name implements engine.Duty.
func (s *spreader) Name() string { return "worker-spread" }

// Run sheds until ctx ends.
func (s *spreader) Run(ctx context.Context) error {
	var quietUntil, since time.Time // since: when the excess was first seen (zero: none)
	for {
		changed := s.reg.routesChanged()
		var again <-chan time.Time
		own, peers := s.reg.workers(), s.peers()
		n := excessWorkers(own, peers)
		now := s.clock.Now()
		switch {
		case n <= 0:
			since = time.Time{}
		case since.IsZero():
			since = now
			again = s.clock.After(s.settle)
		case now.Sub(since) < s.settle:
			again = s.clock.After(s.settle - now.Sub(since))
		case now.Before(quietUntil):
			again = s.clock.After(quietUntil.Sub(now))
		default:
			quietUntil, since = now.Add(s.cooldown), time.Time{}
			for _, shed := range s.reg.shed(n) {
				s.log.Info().Str("worker_id", shed.workerID).Int("workers", own).Int("peer_brokers", len(peers)).
					Int("peer_workers", sum(peers)).
					Msg("broker serves more than its share of the workers; ending a session once its stages finish, so the worker reconnects to another broker")
			}
		}
		if s.looked != nil {
			s.looked(n)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-again:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.clock.After(s.pace):
		}
	}
}

func sum(ns []int) int {
	t := 0
	for _, n := range ns {
		t += n
	}
	return t
}
