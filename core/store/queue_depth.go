package store

import (
	"context"
	"fmt"
)

// QueueDepth counts work_queue rows by kind and state (pending, leased) for
// the converge_queue_depth gauge. Off the hot path: scraped, cached, and
// bounded by the caller's timeout.
func (s *Store) QueueDepth(ctx context.Context) (map[[2]string]float64, error) {
	rows, err := s.primary.Query(ctx, `
SELECT kind, CASE WHEN worker_id IS NULL THEN 'pending' ELSE 'leased' END, count(*)
  FROM work_queue GROUP BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("read queue depth: %w", err)
	}
	defer rows.Close()
	out := map[[2]string]float64{}
	for rows.Next() {
		var kind, state string
		var n int64
		if err := rows.Scan(&kind, &state, &n); err != nil {
			return nil, fmt.Errorf("read queue depth: %w", err)
		}
		out[[2]string{kind, state}] = float64(n)
	}
	return out, rows.Err()
}
