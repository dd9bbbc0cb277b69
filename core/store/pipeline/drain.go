package pipeline

import (
	"context"
	"time"
)

// DrainOutboxBatch applies up to limit outbox results in shards [lo, hi]
// (drain_outbox_batch) in one transaction and returns how many it popped; a
// full batch means there may be more. The pops go partition by partition
// (each statement prunes to one), starting at a random partition of the
// range so none starves; the results are then applied as one batch behind
// one sorted lock pass, so concurrent drainers cannot deadlock.
func (s *Store) DrainOutboxBatch(ctx context.Context, limit, lo, hi int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT drain_outbox_batch($1, $2, $3, coalesce($4::timestamptz, now()))`,
		limit, lo, hi, s.now()).Scan(&n)
	return n, wrap(err, "drain outbox batch (shards %d-%d)", lo, hi)
}

// DrainRollupRechecks re-runs the rollup gate for up to limit armed roots in
// shards [lo, hi] (drain_rollup_rechecks) and returns how many pended.
func (s *Store) DrainRollupRechecks(ctx context.Context, limit, lo, hi int) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `SELECT drain_rollup_rechecks($1, $2, $3, coalesce($4::timestamptz, now()))`,
		limit, lo, hi, s.now()).Scan(&n)
	return n, wrap(err, "drain rollup rechecks (shards %d-%d)", lo, hi)
}

// NotifyWorkReady sends work_ready in a statement of its own, outside any
// drain transaction and outside notify_gated's window. The drainer calls it
// after a drain commits: the gated NOTIFY inside the drain is decided when
// the drain runs, so a drain whose transaction commits after the window's
// winner could otherwise leave its pends unannounced until a dispatcher's
// idle poll. The caller coalesces (core/control's drainer sends at most one
// per ~20 ms per process, always with a trailing edge).
func (s *Store) NotifyWorkReady(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, `SELECT pg_notify('work_ready', '')`)
	return wrap(err, "notify work_ready")
}

// OutboxLag is how long the oldest result in shards [lo, hi] has waited in
// work_outbox for the drain (outbox_lag): 0 when none waits. The brokers'
// claims pace themselves on it (the dispatcher's drain-lag bound). One
// index probe a partition of the range, however long the backlog.
func (s *Store) OutboxLag(ctx context.Context, lo, hi int) (time.Duration, error) {
	var us int64
	err := s.pool.QueryRow(ctx, `SELECT outbox_lag($1, $2, coalesce($3::timestamptz, now()))`, lo, hi, s.now()).Scan(&us)
	if err != nil {
		return 0, wrap(err, "read the outbox's lag (shards %d-%d)", lo, hi)
	}
	return time.Duration(us) * time.Microsecond, nil
}
