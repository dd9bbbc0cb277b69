package pipeline

import "context"

// DrainOutboxBatch applies up to max outbox results in shards [lo, hi]
// (drain_outbox_batch) in one transaction and returns how many it popped; a
// full batch means there may be more. The pops go partition by partition
// (each statement prunes to one), starting at a random partition of the
// range so none starves; the results are then applied as one batch behind
// one sorted lock pass, so concurrent drainers cannot deadlock.
func (s *Store) DrainOutboxBatch(ctx context.Context, max, lo, hi int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT drain_outbox_batch($1, $2, $3, coalesce($4::timestamptz, now()))`,
		max, lo, hi, s.now()).Scan(&n)
	return n, wrap(err, "drain outbox batch (shards %d-%d)", lo, hi)
}

// DrainRollupRechecks re-runs the rollup gate for up to max armed roots in
// shards [lo, hi] (drain_rollup_rechecks) and returns how many pended.
func (s *Store) DrainRollupRechecks(ctx context.Context, max, lo, hi int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT drain_rollup_rechecks($1, $2, $3, coalesce($4::timestamptz, now()))`,
		max, lo, hi, s.now()).Scan(&n)
	return n, wrap(err, "drain rollup rechecks (shards %d-%d)", lo, hi)
}
