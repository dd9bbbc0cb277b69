// Package membership is the store half of the running-fleet registry
// (cluster_members): each process upserts its own row every beat, stamped
// with the database clock so liveness is free of cross-pod clock skew,
// deletes it on clean shutdown, and asks the database for its contiguous
// shard range among the live members of its role (assign_member_shards).
package membership

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// DB is a pgx pool, connection or transaction (the store's one querier).
type DB = dbx.Querier

// The roles a member can run as.
const (
	RoleAll     = "all"
	RoleControl = "control"
	RoleBroker  = "broker"
)

// Defaults of the shard assignment: 256 logical shards, and a member is live
// while its last heartbeat is newer than 3 × the 10 s beat.
const (
	DefaultTotalShards = shard.Total
	DefaultLiveness    = 30 * time.Second
	DefaultGCTTL       = 5 * time.Minute
)

// Member is one running process of the binary.
type Member struct {
	ID       string
	Role     string
	Kinds    []string
	Shards   *shard.Range    // the span it currently owns; nil when none reported
	Config   json.RawMessage // its booted runtime config; nil stores {}
	Version  string
	Host     string
	PID      int
	InFlight int
	// Workers is the worker sessions a broker serves (0 for a control):
	// its peers read it to spread the workers over the brokers.
	Workers   int
	StartedAt time.Time
	// LockKey is the key of the member's liveness lock (LockClass, LockKey);
	// 0 when it holds none (then only its heartbeat says it is alive).
	LockKey int32
	// LastHeartbeat is stamped by the database; ignored on write.
	LastHeartbeat time.Time
	// ReadAt is the database clock when the row was read, the clock to
	// judge LastHeartbeat's age by (a reader's own may be off); read-only.
	ReadAt time.Time
	// Rejoin makes this write wake the peers (cluster_changed) even when
	// the row was already there: the member is back after its liveness lock
	// was lost (a database restart, a cut connection), and its peers'
	// liveness rule has counted it out meanwhile. A row that survived the
	// loss fires no insert trigger, so without this wake peers that re-tiled
	// without it learn of its return only at their next poll, and the shards
	// each side believes the other owns go unclaimed until then. Write-only.
	Rejoin bool
	// Liveness is the window the peers' liveness rule judges this member's
	// heartbeat by (0: DefaultLiveness). A write whose previous beat is
	// older than it is a return after a lapse — beats that failed or were
	// held up while the liveness lock stayed held — and wakes the peers as
	// a Rejoin does: they counted the member out meanwhile. Write-only.
	Liveness time.Duration
	// Request is an admin's pending drain or kill (zero: none); read-only,
	// written by RequestControl.
	Request Request
}

// Store reads and writes cluster_members.
type Store struct {
	db DB
}

// New returns a Store on db.
func New(db DB) *Store { return &Store{db: db} }

// upsertSQL writes a member's row. A beat that changes the member's served
// kinds or its number of workers, a rejoin ($13: the member holds its
// liveness lock again after losing it) and a return after a lapse (its last
// beat older than the liveness window $15, in seconds) fire cluster_changed
// (the join's own wake is the insert trigger's):
// peers route stages to a broker by the kinds its row advertises, and without
// the wake they would learn of a worker that just connected only at their
// next poll — a dead worker's stages waited that long for a peer's worker;
// and they spread the workers by the numbers the rows report (spread.go in
// the broker).
// prev reads the row as it was before this statement (its snapshot).
// A row inserted again after the dead-member probe removed it (the member
// lost its liveness lock for a moment) takes back the drain or kill the
// removed row carried, which the probe kept on the id's tombstone
// (reap_unlocked_cluster_members): the admin was told it was recorded, and
// the member may not have read it before the blip. A beat never touches the
// request of a row that is there.
const upsertSQL = `
WITH prev AS (
    SELECT kinds, workers, last_heartbeat FROM cluster_members WHERE member_id = $1
), up AS (
INSERT INTO cluster_members AS m (member_id, role, kinds, shard_lo, shard_hi, config, version, host, pid,
                                  in_flight, workers, started_at, last_heartbeat, lock_key,
                                  control, control_by, control_at)
SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $14, coalesce($11::timestamptz, now()), now(), $12,
       t.control, t.control_by, t.control_at
  FROM (VALUES (1)) AS one LEFT JOIN cluster_member_tombstones t ON t.member_id = $1
ON CONFLICT (member_id) DO UPDATE
   SET role = EXCLUDED.role, kinds = EXCLUDED.kinds, shard_lo = EXCLUDED.shard_lo, shard_hi = EXCLUDED.shard_hi,
       config = EXCLUDED.config, version = EXCLUDED.version, host = EXCLUDED.host, pid = EXCLUDED.pid,
       in_flight = EXCLUDED.in_flight, workers = EXCLUDED.workers, started_at = EXCLUDED.started_at,
       last_heartbeat = now(), lock_key = EXCLUDED.lock_key
RETURNING last_heartbeat, started_at, kinds, workers
)
SELECT up.last_heartbeat, up.started_at,
       CASE WHEN EXISTS (SELECT 1 FROM prev)
                 AND ($13 OR (SELECT (kinds, workers) FROM prev) IS DISTINCT FROM (up.kinds, up.workers)
                      OR (SELECT last_heartbeat FROM prev) <= now() - make_interval(secs => $15))
            THEN pg_notify('cluster_changed', '') END IS NULL
  FROM up`

// Upsert writes m's row in one primary-key upsert stamped with the database
// clock and returns the stamped heartbeat. The first upsert of a member is a
// join (it fires cluster_changed); later ones are plain beats, which fire it
// only when the served kinds changed.
// A zero StartedAt becomes the database's now() on the first write.
func (s *Store) Upsert(ctx context.Context, m Member) (time.Time, error) {
	kinds := m.Kinds
	if kinds == nil {
		kinds = []string{}
	}
	cfg := m.Config
	if len(cfg) == 0 {
		cfg = json.RawMessage(`{}`)
	}
	var lo, hi *int
	if m.Shards != nil {
		lo, hi = &m.Shards.Lo, &m.Shards.Hi
	}
	var started any
	if !m.StartedAt.IsZero() {
		started = m.StartedAt
	}
	version := m.Version
	if version == "" {
		version = "dev"
	}
	var lockKey *int32
	if m.LockKey != 0 {
		lockKey = &m.LockKey
	}
	liveness := m.Liveness
	if liveness <= 0 {
		liveness = DefaultLiveness
	}
	var beat, startedAt time.Time
	var notified bool
	err := s.db.QueryRow(ctx, upsertSQL, m.ID, m.Role, kinds, lo, hi, string(cfg), version, m.Host, m.PID,
		m.InFlight, started, lockKey, m.Rejoin, m.Workers, liveness.Seconds()).Scan(&beat, &startedAt, &notified)
	if err != nil {
		return time.Time{}, dbx.Wrap(err, "upsert cluster member %s", m.ID)
	}
	return beat, nil
}

// Heartbeat is the periodic beat: the same upsert as Upsert, so a member
// whose row was garbage-collected while it was partitioned rejoins.
func (s *Store) Heartbeat(ctx context.Context, m Member) (time.Time, error) {
	return s.Upsert(ctx, m)
}

// Deregister deletes the member's own row (clean shutdown), which fires
// cluster_changed so the role re-tiles at once. It reports whether a row was
// there.
func (s *Store) Deregister(ctx context.Context, id string) (bool, error) {
	tag, err := s.db.Exec(ctx, `DELETE FROM cluster_members WHERE member_id = $1`, id)
	if err != nil {
		return false, dbx.Wrap(err, "deregister cluster member %s", id)
	}
	return tag.RowsAffected() > 0, nil
}

// List returns every registered member, live or not, ordered by role and id.
func (s *Store) List(ctx context.Context) ([]Member, error) {
	rows, err := s.db.Query(ctx, `
SELECT `+memberColumns+`
  FROM cluster_members ORDER BY role, member_id COLLATE "C"`)
	if err != nil {
		return nil, dbx.Wrap(err, "list cluster members")
	}
	members, err := pgx.CollectRows(rows, scanMember)
	if err != nil {
		return nil, dbx.Wrap(err, "list cluster members")
	}
	return members, nil
}

// AssignShards asks the database for id's contiguous range of [0, total)
// among the live members of its role (heartbeat newer than liveness). A member
// that is not live, or one of more live members than shards, gets an empty
// span.
func (s *Store) AssignShards(ctx context.Context, id string, total int, liveness time.Duration) (shard.Range, error) {
	var lo, hi *int
	err := s.db.QueryRow(ctx, `
SELECT lower(r), upper(r) FROM assign_member_shards($1, $2, $3) AS r`,
		id, total, livenessSecs(liveness)).Scan(&lo, &hi)
	if err != nil {
		return shard.Range{}, dbx.Wrap(err, "assign shards to member %s", id)
	}
	if lo == nil || hi == nil {
		return shard.Range{}, nil
	}
	return shard.Range{Lo: *lo, Hi: *hi}, nil
}

// GCStale hard-deletes the members whose heartbeat is older than ttl
// (crashed, or their deregister timed out). A removed row's pending drain or
// kill is kept on the id's tombstone, and comes back with the row if the
// member beats again (Upsert). It returns the number removed.
func (s *Store) GCStale(ctx context.Context, ttl time.Duration) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT gc_stale_cluster_members(make_interval(secs => $1))`, ttl.Seconds()).Scan(&n)
	if err != nil {
		return 0, dbx.Wrap(err, "gc stale cluster members")
	}
	return n, nil
}
