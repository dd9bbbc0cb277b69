package pipeline

import "context"

// Claimable reports, for each batch's (kind, version, task type), whether
// shards [lo, hi] hold a claimable row (pending and due), in one statement:
// a LIMIT 1 probe of idx_work_queue_pending per pair, pruned to the range's
// partitions. It is the broker's idle failsafe poll — one round trip however
// many pairs it serves — and claims nothing (Max is ignored). The probe is
// ordered by the index's own order, which keeps it on the index: written as
// an EXISTS it was planned as a hash semi-join over a Seq Scan of every
// partition, the whole queue read on every idle poll.
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
	err := s.pool.QueryRow(ctx, `
SELECT coalesce(array_agg(x.i ORDER BY x.i), '{}')
  FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS x(kind, version, task_type, i)
 CROSS JOIN LATERAL (SELECT 1 FROM work_queue w
                      WHERE w.kind = x.kind AND w.version = x.version AND w.task_type = x.task_type
                        AND w.worker_id IS NULL AND w.not_before <= coalesce($6::timestamptz, now())
                        AND w.shard_id BETWEEN $4 AND $5
                      ORDER BY w.not_before
                      LIMIT 1) e`,
		kinds, versions, types, lo, hi, s.now()).Scan(&hits)
	if err != nil {
		return nil, wrap(err, "probe claimable work (shards %d-%d, %d pairs)", lo, hi, len(batches))
	}
	for _, i := range hits {
		out[i-1] = true
	}
	return out, nil
}
