package store

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// WaitGate names one gate that holds a resource back (explain_resource).
type WaitGate string

// The gates, in the order explain_resource checks them.
const (
	GateDeletingChildren   WaitGate = "deleting_children"
	GateDeletingDependents WaitGate = "deleting_dependents"
	GateDeletingSweep      WaitGate = "deleting_sweep"
	GateDeletingTeardown   WaitGate = "deleting_teardown"
	GateQuarantined        WaitGate = "quarantined"
	GateOrphaned           WaitGate = "orphaned"
	GateFailedTerminal     WaitGate = "failed_terminal"
	GateComposing          WaitGate = "composing"
	GateClaimed            WaitGate = "claimed"
	GateBackoff            WaitGate = "backoff"
	GateKindCap            WaitGate = "kind_cap"
	GateNoWorker           WaitGate = "no_worker"
	GateQueued             WaitGate = "queued"
	GateFailedRetry        WaitGate = "failed_retry"
	GateUpstream           WaitGate = "upstream"
	GateDescendants        WaitGate = "descendants"
	GateNotQueued          WaitGate = "not_queued"
	// GateProviderConfigMissing: its providerConfigRef names a providerconfig
	// that does not exist, so no task is queued for it (a reconcile, a
	// resync, a teardown) until one of that name is applied. Named last,
	// after any gate holding it first.
	GateProviderConfigMissing WaitGate = "provider_config_missing"
)

// Wait is one gate holding a resource, as the database explains it.
type Wait struct {
	Gate    WaitGate
	Message string
	// Since is when the gate began (nil when unknown); Until when it lifts
	// by itself (an orphan's grace, a backoff), else nil.
	Since, Until *time.Time
	// Blockers are up to 20 resources that hold it (upstreams, unsettled
	// descendants, children or dependents of a deletion); BlockerCount is
	// how many there are in all.
	Blockers     []uuid.UUID
	BlockerCount int
	// InFlight and Cap are the kind's concurrency-cap figures (nil when the
	// gate does not involve the cap).
	InFlight, Cap *int
	// BrokerID is the broker holding the lease of a claimed task.
	BrokerID string
}

// DefaultLiveness is the fleet's liveness window explain_resource judges a
// broker by when the caller passes none: 3 × the default member heartbeat.
const DefaultLiveness = 30 * time.Second

// livenessSecs is a liveness window as live_cluster_members takes it: whole
// seconds, rounded as the membership's own reads round it (at least 1).
func livenessSecs(d time.Duration) int {
	return max(1, int(d.Round(time.Second)/time.Second))
}

// Explain returns the gates holding resource id, the one holding it now
// first; none when nothing holds it (it is Ready or Degraded for its spec).
// The explanation is explain_resource: the scheduler's own predicates, read
// in the database. liveness is the fleet's liveness window (0: the default).
// ErrNotFound when there is no such resource.
func (s *Store) Explain(ctx context.Context, id uuid.UUID, liveness time.Duration) ([]Wait, error) {
	all, err := s.ExplainMany(ctx, []uuid.UUID{id}, liveness)
	if err != nil {
		return nil, err
	}
	ws, ok := all[id]
	if !ok {
		return nil, notFound("resource %s not found", id)
	}
	return ws, nil
}

// ExplainMany is Explain for many resources in one statement (the batch
// behind the API's Resource.waitingOn): each stored resource's gates, in
// explain_resource's order (an empty list when nothing holds it); ids with
// no resource are absent from the map. Each id's row is probed by key in a
// fenced LATERAL (OFFSET 0): as an EXISTS, under statistics taken while the
// fleet was empty, the planner read the whole primary key for it
// (TestPlans_APIUnderEmptiedFleetStatistics).
func (s *Store) ExplainMany(ctx context.Context, ids []uuid.UUID, liveness time.Duration) (map[uuid.UUID][]Wait, error) {
	out := make(map[uuid.UUID][]Wait, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	if liveness <= 0 {
		liveness = DefaultLiveness
	}
	rows, err := s.primary.Query(ctx, `
		SELECT u.id, e.gate, coalesce(e.message, ''), e.since, e.until_at, coalesce(e.blocker_ids, '{}'),
		       coalesce(e.blocker_count, 0), e.in_flight, e.cap, coalesce(e.broker_id, '')
		  FROM unnest($1::uuid[]) WITH ORDINALITY AS u(id, n)
		 CROSS JOIN LATERAL (SELECT r.id FROM resources r WHERE r.id = u.id OFFSET 0) r
		  LEFT JOIN LATERAL explain_resource(u.id, now(), $2)
		       WITH ORDINALITY AS e(gate, message, since, until_at, blocker_ids, blocker_count, in_flight, cap, broker_id, k)
		       ON true
		 ORDER BY u.n, e.k`, ids, livenessSecs(liveness))
	if err != nil {
		return nil, mapErr(err, "explain resources")
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id       uuid.UUID
			gate     *string
			w        Wait
			inFlight *int64
		)
		if err := rows.Scan(&id, &gate, &w.Message, &w.Since, &w.Until, &w.Blockers, &w.BlockerCount, &inFlight, &w.Cap,
			&w.BrokerID); err != nil {
			return nil, mapErr(err, "explain resources")
		}
		if gate == nil { // nothing holds it
			out[id] = []Wait{}
			continue
		}
		w.Gate = WaitGate(*gate)
		if inFlight != nil {
			n := int(*inFlight)
			w.InFlight = &n
		}
		out[id] = append(out[id], w)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "explain resources")
	}
	return out, nil
}
