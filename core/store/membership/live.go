package membership

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// memberColumns is the column list scanMember reads.
const memberColumns = `member_id, role, kinds, shard_lo, shard_hi, config, version, host, pid, in_flight, workers,
       started_at, last_heartbeat, coalesce(lock_key, 0), coalesce(control, ''), coalesce(control_by, ''), control_at,
       now()`

// ListLive returns the live members (live_cluster_members: heartbeat within
// liveness of the database clock and, for a member that holds one, its
// liveness lock still granted): the routing view, by the same rule shard
// tiling uses.
func (s *Store) ListLive(ctx context.Context, liveness time.Duration) ([]Member, error) {
	rows, err := s.db.Query(ctx, `
SELECT `+memberColumns+`
  FROM cluster_members
 WHERE member_id IN (SELECT member_id FROM live_cluster_members($1))
 ORDER BY role, member_id COLLATE "C"`, livenessSecs(liveness))
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
func scanMember(row pgx.CollectableRow) (Member, error) { return scanMemberThen(row) }

// scanMemberThen reads memberColumns, then the extra columns into more.
func scanMemberThen(row pgx.CollectableRow, more ...any) (Member, error) {
	var m Member
	var lo, hi *int
	var cfg []byte
	dest := []any{&m.ID, &m.Role, &m.Kinds, &lo, &hi, &cfg, &m.Version, &m.Host, &m.PID, &m.InFlight,
		&m.Workers, &m.StartedAt, &m.LastHeartbeat, &m.LockKey, &m.Request.Action, &m.Request.By, &m.Request.At, &m.ReadAt}
	if err := row.Scan(append(dest, more...)...); err != nil {
		return Member{}, err
	}
	if lo != nil && hi != nil {
		m.Shards = &shard.Range{Lo: *lo, Hi: *hi}
	}
	m.Config = cfg
	return m, nil
}

// livenessSecs is the whole-second window the SQL takes (at least 1).
func livenessSecs(d time.Duration) int {
	return max(1, int(d.Round(time.Second)/time.Second))
}
