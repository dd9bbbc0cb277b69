package membership

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/core/store/internal/dbx"
)

// LockClass is the advisory-lock class (the first int4 of the two-int4 form)
// every member's liveness lock uses; the second int4 is the member's
// lock_key. live_cluster_members and reap_unlocked_cluster_members read the
// same constant from pg_locks.
const LockClass = 20251201

// ErrLockHeld reports that the key is held by another session (the member's
// own previous backend, not yet gone, or a collision).
var ErrLockHeld = errors.New("liveness lock held by another session")

// Server-side keepalive settings of the lock session: a client that vanishes
// without closing its socket (power loss, a partition) is noticed by the
// server after about idle + interval × count = 4 s, and the lock released.
// The member's own check (Ping with a deadline of about a second) is
// shorter, so a partitioned member stops claiming before its peers can see
// its lock go.
var lockSessionSettings = []string{
	"SET tcp_keepalives_idle = 2",
	"SET tcp_keepalives_interval = 1",
	"SET tcp_keepalives_count = 2",
	"SET tcp_user_timeout = 4000",
	"SET idle_session_timeout = 0",
	"SET statement_timeout = 2000",
}

// NewLockKey returns a random key in [1, 2^31).
func NewLockKey() int32 { return rand.Int32N(1<<31-1) + 1 }

// SessionLock is a member's liveness lock: a session-level advisory lock
// held on a connection of its own, taken out of the pool. It is held for as
// long as that backend lives; Ping tells the member whether it still does.
type SessionLock struct {
	conn *pgx.Conn
	key  int32
}

// AcquireSessionLock takes a connection out of pool, tunes its keepalives and
// takes the advisory lock (LockClass, key) on it without waiting. It fails
// with ErrLockHeld when another session holds the key, or when another
// member's row records it (a collision with a crashed member's row, which
// would otherwise look alive again).
func AcquireSessionLock(ctx context.Context, pool *pgxpool.Pool, memberID string, key int32) (*SessionLock, error) {
	pc, err := pool.Acquire(ctx)
	if err != nil {
		return nil, dbx.Wrap(err, "acquire the liveness lock connection")
	}
	conn := pc.Hijack()
	l := &SessionLock{conn: conn, key: key}
	if err := l.take(ctx, memberID); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

func (l *SessionLock) take(ctx context.Context, memberID string) error {
	for _, s := range lockSessionSettings {
		if _, err := l.conn.Exec(ctx, s); err != nil {
			return dbx.Wrap(err, "tune the liveness lock session (%s)", s)
		}
	}
	var got bool
	err := l.conn.QueryRow(ctx, `
SELECT pg_try_advisory_lock($1, $2)
       AND NOT EXISTS (SELECT 1 FROM cluster_members WHERE lock_key = $2 AND member_id <> $3)`,
		int32(LockClass), l.key, memberID).Scan(&got)
	if err != nil {
		return dbx.Wrap(err, "take the liveness lock %d", l.key)
	}
	if !got {
		return fmt.Errorf("liveness lock %d: %w", l.key, ErrLockHeld)
	}
	return nil
}

// Key is the lock's key (the member's lock_key).
func (l *SessionLock) Key() int32 { return l.key }

// Ping round-trips the lock session within timeout: nil means the backend,
// and so the lock, is still there.
func (l *SessionLock) Ping(ctx context.Context, timeout time.Duration) error {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := l.conn.Ping(pctx); err != nil {
		return dbx.Wrap(err, "ping the liveness lock session")
	}
	return nil
}

// Close ends the session (and so releases the lock), bounded by a second.
func (l *SessionLock) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = l.conn.Close(ctx)
}

// ReapUnlocked deletes the rows of members whose liveness lock is no longer
// held (reap_unlocked_cluster_members) and returns their ids; each removal
// fires cluster_changed. selfKey is the caller's own lock key (0: it holds
// none): while the database does not show that lock held, nothing is
// removed, since every peer's lock is then likely gone with it (a restart
// or failover the caller has not noticed yet).
func (s *Store) ReapUnlocked(ctx context.Context, selfKey int32) ([]string, error) {
	var self *int32
	if selfKey != 0 {
		self = &selfKey
	}
	rows, err := s.db.Query(ctx, `SELECT reap_unlocked_cluster_members($1::int)`, self)
	if err != nil {
		return nil, dbx.Wrap(err, "reap unlocked cluster members")
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, dbx.Wrap(err, "reap unlocked cluster members")
	}
	return ids, nil
}
