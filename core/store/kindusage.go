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

// KindUsage returns the usage of one kind version (KindUsages of one).
func (s *Store) KindUsage(ctx context.Context, kv manifest.KindVersion, liveness time.Duration) (KindUsage, error) {
	all, err := s.KindUsages(ctx, []manifest.KindVersion{kv}, liveness)
	if err != nil {
		return KindUsage{}, err
	}
	return all[kv], nil
}

// KindUsages returns the usage of many kind versions in one statement (the
// batch behind the API's Kind.usage, so a list of every kind costs one
// statement, not one a kind): a few primary-key rows of
// resource_phase_counts and the pending deltas each, and the fleet's rows
// once (cluster_members.kinds lists the "kind/version" pairs each member's
// broker serves), a member judged live within liveness, the fleet's
// liveness window (0: DefaultLiveness). It runs on the primary: liveness
// reads pg_locks, which a replica does not share.
func (s *Store) KindUsages(ctx context.Context, kvs []manifest.KindVersion, liveness time.Duration) (map[manifest.KindVersion]KindUsage, error) {
	out := make(map[manifest.KindVersion]KindUsage, len(kvs))
	if len(kvs) == 0 {
		return out, nil
	}
	if liveness <= 0 {
		liveness = DefaultLiveness
	}
	kinds, versions := make([]string, len(kvs)), make([]string, len(kvs))
	for i, kv := range kvs {
		kinds[i], versions[i] = kv.Kind, kv.Version
	}
	rows, err := s.primary.Query(ctx, `
		WITH served AS MATERIALIZED (
		    SELECT m.kinds FROM live_cluster_members($3) l JOIN cluster_members m ON m.member_id = l.member_id)
		SELECT k.kind, k.version,
		       coalesce((SELECT sum(n) FROM (
		           SELECT c.n FROM resource_phase_counts c WHERE c.kind = k.kind AND c.version = k.version
		           UNION ALL
		           SELECT d.dn FROM resource_phase_deltas d WHERE d.kind = k.kind AND d.version = k.version) t), 0)::bigint,
		       (SELECT count(*) FROM served m WHERE k.kind || '/' || k.version = ANY (m.kinds))::int
		  FROM unnest($1::text[], $2::text[]) AS k(kind, version)`,
		kinds, versions, livenessSecs(liveness))
	if err != nil {
		return nil, mapErr(err, "kind usage")
	}
	defer rows.Close()
	for rows.Next() {
		var kv manifest.KindVersion
		var u KindUsage
		if err := rows.Scan(&kv.Kind, &kv.Version, &u.Resources, &u.ServedBy); err != nil {
			return nil, mapErr(err, "kind usage")
		}
		out[kv] = u
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "kind usage")
	}
	return out, nil
}
