package membership

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// ListLive returns the members whose heartbeat is within liveness of the
// database clock (the routing view: the same window shard tiling uses).
func (s *Store) ListLive(ctx context.Context, liveness time.Duration) ([]Member, error) {
	rows, err := s.db.Query(ctx, `
SELECT member_id, role, kinds, shard_lo, shard_hi, config, version, host, pid, in_flight, started_at, last_heartbeat
  FROM cluster_members
 WHERE last_heartbeat > now() - make_interval(secs => $1)
 ORDER BY role, member_id COLLATE "C"`, liveness.Seconds())
	if err != nil {
		return nil, dbx.Wrap(err, "list live cluster members")
	}
	members, err := pgx.CollectRows(rows, scanMember)
	if err != nil {
		return nil, dbx.Wrap(err, "list live cluster members")
	}
	return members, nil
}

// scanMember reads one cluster_members row in the column order List uses.
func scanMember(row pgx.CollectableRow) (Member, error) {
	var m Member
	var lo, hi *int
	var cfg []byte
	if err := row.Scan(&m.ID, &m.Role, &m.Kinds, &lo, &hi, &cfg, &m.Version, &m.Host, &m.PID, &m.InFlight,
		&m.StartedAt, &m.LastHeartbeat); err != nil {
		return Member{}, err
	}
	if lo != nil && hi != nil {
		m.Shards = &shard.Range{Lo: *lo, Hi: *hi}
	}
	m.Config = cfg
	return m, nil
}
