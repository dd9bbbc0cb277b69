package pipeline

import "context"

// Claimable reports, for each batch's (kind, version, task type), whether
// shards [lo, hi] hold a claimable row (pending and due), in one statement:
// claimable_pairs (db/functions), a LIMIT 1 probe of idx_work_queue_pending
// per pair, pruned to the range's partitions. It is the broker's idle
// failsafe poll — one round trip however many pairs it serves — and claims
// nothing (Max is ignored).
func (s *Store) Claimable(ctx context.Context, lo, hi int, batches []Batch) ([]bool, error) {
	out := make([]bool, len(batches))
	if len(batches) == 0 {
		return out, nil
	}
	kinds, versions, types := make([]string, len(batches)), make([]string, len(batches)), make([]string, len(batches))
	for i, b := range batches {
		kinds[i], versions[i], types[i] = b.Kind, b.Version, string(b.TaskType)
	}
	var hits []int32
	err := s.pool.QueryRow(ctx, `SELECT claimable_pairs($1::text[], $2::text[], $3::text[], $4, $5, coalesce($6::timestamptz, now()))`,
		kinds, versions, types, lo, hi, s.now()).Scan(&hits)
	if err != nil {
		return nil, wrap(err, "probe claimable work (shards %d-%d, %d pairs)", lo, hi, len(batches))
	}
	for _, i := range hits {
		out[i-1] = true
	}
	return out, nil
}
