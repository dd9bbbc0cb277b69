package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
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
	if liveness <= 0 {
		liveness = DefaultLiveness
	}
	var exists bool
	if err := s.primary.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM resources WHERE id = $1)`, id).Scan(&exists); err != nil {
		return nil, mapErr(err, "resource "+id.String())
	}
	if !exists {
		return nil, notFound("resource %s not found", id)
	}
	rows, err := s.primary.Query(ctx, `
		SELECT gate, message, since, until_at, coalesce(blocker_ids, '{}'), coalesce(blocker_count, 0), in_flight, cap,
		       coalesce(broker_id, '')
		  FROM explain_resource($1, now(), $2)`, id, livenessSecs(liveness))
	if err != nil {
		return nil, mapErr(err, "explain resource "+id.String())
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Wait, error) {
		var w Wait
		var inFlight *int64
		err := row.Scan(&w.Gate, &w.Message, &w.Since, &w.Until, &w.Blockers, &w.BlockerCount, &inFlight, &w.Cap, &w.BrokerID)
		if inFlight != nil {
			n := int(*inFlight)
			w.InFlight = &n
		}
		return w, err
	})
	if err != nil {
		return nil, mapErr(err, "explain resource "+id.String())
	}
	return out, nil
}
