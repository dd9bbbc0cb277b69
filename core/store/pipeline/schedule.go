package pipeline

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
)

// ScheduleEligible runs the gate (schedule_eligible) for ids and returns how
// many reconcile rows it queued or raised to a newer generation.
func (s *Store) ScheduleEligible(ctx context.Context, ids []uuid.UUID) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT schedule_eligible($1::uuid[], coalesce($2::timestamptz, now()))`,
		ids, s.now()).Scan(&n)
	return n, wrap(err, "schedule %d resources", len(ids))
}

// EnqueueOperation records a Pending resource_operations row for verb and
// queues its operate task; it returns the operation id.
func (s *Store) EnqueueOperation(ctx context.Context, resourceID uuid.UUID, verb string, input json.RawMessage) (uuid.UUID, error) {
	var id uuid.UUID
	err := s.pool.QueryRow(ctx, `SELECT enqueue_operation($1, $2, $3)`, resourceID, verb, nullJSON(input)).Scan(&id)
	return id, wrap(err, "enqueue operation %s on %s", verb, resourceID)
}

// nullJSON maps an empty document to SQL NULL.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}
