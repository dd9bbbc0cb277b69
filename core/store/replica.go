package store

import (
	"context"
	"fmt"
	"time"
)

// WaitReplay waits until the read pool (a streaming replica) has replayed
// the primary's current WAL position, polling every 2 ms, for at most
// budget. It reports whether the replica caught up; a store that reads from
// the primary has nothing to wait for (true).
func (s *Store) WaitReplay(ctx context.Context, budget time.Duration) (bool, error) {
	if s.read == s.primary {
		return true, nil
	}
	var lsn string
	if err := s.primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&lsn); err != nil {
		return false, fmt.Errorf("read primary wal position: %w", err)
	}
	deadline := time.Now().Add(budget)
	for {
		var caught bool
		err := s.read.QueryRow(ctx,
			`SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, true)`, lsn).Scan(&caught)
		if err != nil {
			return false, fmt.Errorf("read replica replay position: %w", err)
		}
		if caught {
			return true, nil
		}
		if time.Now().After(deadline) {
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}
