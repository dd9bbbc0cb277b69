package broker

import (
	"context"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testsignal"
)

// leaseBeater renews work_queue leases.
type leaseBeater interface {
	Heartbeat(ctx context.Context, workerID string, lo, hi int, keys []pipeline.TaskKey) (int, error)
}

// heldTasks lists the tasks whose leases this broker holds.
type heldTasks interface {
	keys() []pipeline.TaskKey
}

// heartbeatPartition is the shard width one heartbeat statement covers (one
// work_queue partition, so each statement prunes to it).
const heartbeatPartition = 16

// heartbeater keeps the leases of in-flight tasks alive, pruned to the span
// of the tasks themselves (not the current ownership: a reshard must not let
// the reaper take work already claimed).
type heartbeater struct {
	id     string
	leases leaseBeater
	tasks  heldTasks
	every  time.Duration
	clock  engine.Clock
	log    zerolog.Logger
	outage *engine.Outage

	testSignals heartbeaterSignals
}

// heartbeaterSignals are the heartbeater's test signals.
type heartbeaterSignals struct {
	beat testsignal.Signal[int] // a round ended; the leases it renewed
}

// Name implements engine.Duty.
func (h *heartbeater) Name() string { return "lease-heartbeater" }

// Run beats every interval until ctx ends.
func (h *heartbeater) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-h.clock.After(h.every):
		}
		h.testSignals.beat.Signal(h.beat(ctx))
	}
}

// beat renews every held lease, one statement per partition, and returns
// how many it renewed.
func (h *heartbeater) beat(ctx context.Context) int {
	keys := h.tasks.keys()
	if len(keys) == 0 {
		return 0
	}
	groups := map[int][]pipeline.TaskKey{}
	for _, k := range keys {
		p := k.ShardID / heartbeatPartition
		groups[p] = append(groups[p], k)
	}
	total := 0
	for p, keys := range groups {
		lo := p * heartbeatPartition
		n, err := h.leases.Heartbeat(ctx, h.id, lo, lo+heartbeatPartition-1, keys)
		if err != nil {
			if ctx.Err() == nil && !h.outage.Failed("lease-heartbeat", err) {
				h.log.Warn().Err(err).Int("tasks", len(keys)).Msg("lease heartbeat failed")
			}
			continue
		}
		total += n
	}
	return total
}
