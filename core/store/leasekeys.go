package store

import (
	"context"
	crand "crypto/rand"
	"time"

	"github.com/jackc/pgx/v5"
)

// leaseKeysLock is the advisory lock (classid, objid) that serializes the
// creation and rotation of lease keys across members.
const leaseKeysLock = 20251209

// LeaseKeysKept is how many of the newest lease keys verify (the newest also
// issues): a rotation leaves the previous keys valid for the secrets still
// out with workers.
const LeaseKeysKept = 3

// LeaseKeys returns the cluster's lease-secret keys (lease_keys), newest
// first. When there is none, or the newest is older than rotateAfter (> 0),
// a fresh random key is added first, under an advisory lock so concurrent
// members add one between them; keys past the newest LeaseKeysKept are
// deleted then.
func (s *Store) LeaseKeys(ctx context.Context, rotateAfter time.Duration) ([][]byte, error) {
	keys, fresh, err := s.leaseKeys(ctx, s.primary, rotateAfter)
	if err != nil || fresh {
		return keys, err
	}
	err = pgx.BeginFunc(ctx, s.primary, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(leaseKeysLock)); err != nil {
			return err
		}
		if keys, fresh, err = s.leaseKeys(ctx, tx, rotateAfter); err != nil || fresh {
			return err
		}
		k := make([]byte, 32)
		_, _ = crand.Read(k) // crypto/rand.Read never fails (Go 1.24+)
		if _, err := tx.Exec(ctx, `INSERT INTO lease_keys (key) VALUES ($1)`, k); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM lease_keys WHERE id < (SELECT min(id) FROM (SELECT id FROM lease_keys ORDER BY id DESC LIMIT $1) n)`,
			LeaseKeysKept); err != nil {
			return err
		}
		keys, _, err = s.leaseKeys(ctx, tx, rotateAfter)
		return err
	})
	if err != nil {
		return nil, mapErr(err, "create or rotate the cluster lease key")
	}
	return keys, nil
}

// leaseKeys reads the newest LeaseKeysKept keys and whether the newest is
// fresh (exists and, with rotateAfter > 0, is younger than it).
func (s *Store) leaseKeys(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, rotateAfter time.Duration) ([][]byte, bool, error) {
	rows, err := q.Query(ctx, `SELECT key, $2::bigint <= 0 OR created_at > now() - make_interval(secs => $2::bigint)
  FROM lease_keys ORDER BY id DESC LIMIT $1`, LeaseKeysKept, int64(rotateAfter.Seconds()))
	if err != nil {
		return nil, false, mapErr(err, "read the cluster lease keys")
	}
	var (
		keys  [][]byte
		fresh bool
	)
	for rows.Next() {
		var (
			k     []byte
			young bool
		)
		if err := rows.Scan(&k, &young); err != nil {
			return nil, false, mapErr(err, "read the cluster lease keys")
		}
		if len(keys) == 0 {
			fresh = young
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, false, mapErr(err, "read the cluster lease keys")
	}
	return keys, fresh, nil
}
