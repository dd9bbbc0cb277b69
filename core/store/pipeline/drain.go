package pipeline

import "context"

// DrainOutboxBatch applies up to max outbox results in shards [lo, hi]
// (drain_outbox_batch) and returns how many it popped; a full batch means
// there may be more. A range that spans partitions is drained one partition
// per transaction, rotating the starting partition between calls: short
// transactions hold their row locks briefly, and a drainer never holds one
// partition's locks while it waits on another's.
func (s *Store) DrainOutboxBatch(ctx context.Context, max, lo, hi int) (int, error) {
	total := 0
	for _, span := range partitionSpans(lo, hi, s.rotor.Add(1)) {
		if total >= max {
			break
		}
		var n int
		err := s.pool.QueryRow(ctx, `SELECT drain_outbox_batch($1, $2, $3, coalesce($4::timestamptz, now()))`,
			max-total, span[0], span[1], s.now()).Scan(&n)
		if err != nil {
			return total, wrap(err, "drain outbox batch (shards %d-%d)", span[0], span[1])
		}
		total += n
	}
	return total, nil
}

// DrainRollupRechecks re-runs the rollup gate for up to max armed roots in
// shards [lo, hi] (drain_rollup_rechecks) and returns how many pended.
func (s *Store) DrainRollupRechecks(ctx context.Context, max, lo, hi int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT drain_rollup_rechecks($1, $2, $3, coalesce($4::timestamptz, now()))`,
		max, lo, hi, s.now()).Scan(&n)
	return n, wrap(err, "drain rollup rechecks (shards %d-%d)", lo, hi)
}
