package store

import (
	"context"
	"time"

	"github.com/converge-run/converge/core/manifest"
)

// KindUsage is how much one kind version is in use: its resources (the
// folded phase counts plus pending deltas, never a count of the table) and
// the live members whose brokers have a worker serving it connected.
type KindUsage struct {
	Resources int64
	ServedBy  int
}

// KindUsage returns the usage of one kind version in one statement: a few
// primary-key rows of resource_phase_counts, the pending deltas, and the
// fleet's rows (cluster_members.kinds lists the "kind/version" pairs each
// member's broker serves), a member judged live within liveness, the
// fleet's liveness window (0: DefaultLiveness). It runs on the primary:
// liveness reads pg_locks, which a replica does not share.
func (s *Store) KindUsage(ctx context.Context, kv manifest.KindVersion, liveness time.Duration) (KindUsage, error) {
	if liveness <= 0 {
		liveness = DefaultLiveness
	}
	var u KindUsage
	err := s.primary.QueryRow(ctx, `
		SELECT coalesce((SELECT sum(n) FROM (
		           SELECT n FROM resource_phase_counts WHERE kind = $1 AND version = $2
		           UNION ALL
		           SELECT dn FROM resource_phase_deltas WHERE kind = $1 AND version = $2) t), 0)::bigint,
		       (SELECT count(*) FROM live_cluster_members($3) l
		          JOIN cluster_members m ON m.member_id = l.member_id
		         WHERE $1 || '/' || $2 = ANY (m.kinds))::int`,
		kv.Kind, kv.Version, livenessSecs(liveness)).Scan(&u.Resources, &u.ServedBy)
	if err != nil {
		return KindUsage{}, mapErr(err, "kind "+kv.String()+": usage")
	}
	return u, nil
}
