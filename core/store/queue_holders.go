package store

import (
	"context"
	"fmt"
	"time"
)

// QueueHolder is what one claimer (a broker's member id, or "" for the
// unleased rows) holds of work_queue at a moment: the chaos suite's view of a
// stalled wave.
type QueueHolder struct {
	WorkerID string
	Rows     int
	// OldestLease and NewestBeat are the ages of the oldest lease and of the
	// most recent heartbeat among the rows (0 for unleased rows).
	OldestLease, NewestBeat time.Duration
	// WithResult counts rows whose result for their claim_epoch already
	// waits in work_outbox (the drain has yet to apply it).
	WithResult int
	// BackingOff counts rows whose not_before is still ahead (a retry
	// backing off after a failed attempt), LongestBackoff the furthest.
	BackingOff     int
	LongestBackoff time.Duration
	// Retried counts rows with a failed attempt behind them.
	Retried int
}

// QueueHolders scans work_queue whole and groups it by claimer. It is a
// diagnostic for tests and the chaos suite (a full scan), never for a hot
// path.
func (s *Store) QueueHolders(ctx context.Context) ([]QueueHolder, error) {
	rows, err := s.primary.Query(ctx, `
SELECT coalesce(q.worker_id, ''), count(*),
       coalesce(extract(epoch FROM now() - min(q.leased_at)), 0)::float8,
       coalesce(extract(epoch FROM now() - max(q.heartbeat_at)), 0)::float8,
       count(*) FILTER (WHERE EXISTS (SELECT 1 FROM work_outbox o
                                       WHERE o.shard_id = q.shard_id AND o.resource_id = q.resource_id
                                         AND o.task_type = q.task_type AND o.op_id = q.op_id
                                         AND o.claim_epoch = q.claim_epoch)),
       count(*) FILTER (WHERE q.not_before > now()),
       coalesce(extract(epoch FROM max(q.not_before) - now()), 0)::float8,
       count(*) FILTER (WHERE q.attempts > 0)
  FROM work_queue q
 GROUP BY 1 ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("read queue holders: %w", err)
	}
	defer rows.Close()
	var out []QueueHolder
	for rows.Next() {
		var h QueueHolder
		var lease, beat, backoff float64
		if err := rows.Scan(&h.WorkerID, &h.Rows, &lease, &beat, &h.WithResult, &h.BackingOff, &backoff, &h.Retried); err != nil {
			return nil, fmt.Errorf("read queue holders: %w", err)
		}
		h.OldestLease, h.NewestBeat = time.Duration(lease*float64(time.Second)), time.Duration(beat*float64(time.Second))
		h.LongestBackoff = max(time.Duration(backoff*float64(time.Second)), 0)
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read queue holders: %w", err)
	}
	return out, nil
}
