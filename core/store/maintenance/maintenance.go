// Package maintenance is the Go face of the reaper's plpgsql passes
// (db/migrations/00003_maintenance.sql): dead-lease recovery, abandoned-work
// GC, crash catch-up, drift resync, orphan expiry, the delete sweep, the
// concurrency-cap recount and the reactor-delivery reaper. Each method runs
// one pass over one contiguous shard range and returns how many rows it
// moved; the control plane's reaper decides when to call which.
//
// The passes read the clock of the database (now()) unless a clock is
// injected with WithClock, which tests use to drive time.
package maintenance

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// DB is the part of a pgx pool, connection or transaction the passes use.
type DB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ShardRange is a contiguous, inclusive range of logical shards [Lo, Hi].
// Every pass filters shard_id BETWEEN Lo AND Hi so the planner prunes the
// partitioned queue tables to the partitions that hold the range.
type ShardRange struct {
	Lo, Hi int
}

// AllShards is the whole logical shard space.
var AllShards = ShardRange{Lo: 0, Hi: 255}

func (r ShardRange) String() string { return fmt.Sprintf("%d-%d", r.Lo, r.Hi) }

// Store runs the maintenance passes.
type Store struct {
	db  DB
	now func() time.Time
}

// New returns a Store on db that uses the database clock.
func New(db DB) *Store { return &Store{db: db} }

// WithClock returns a copy of s whose passes take "now" from clock instead of
// the database. A nil clock restores the database clock.
func (s *Store) WithClock(clock func() time.Time) *Store {
	c := *s
	c.now = clock
	return &c
}

// nowArg is the p_now argument: nil makes the SQL fall back to now().
func (s *Store) nowArg() any {
	if s.now == nil {
		return nil
	}
	return s.now()
}

// count runs one pass that returns an int.
func (s *Store) count(ctx context.Context, sql string, args ...any) (int, error) {
	var n int
	if err := s.db.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, err
	}
	return n, nil
}

// seconds renders a duration as the float seconds make_interval takes.
func seconds(d time.Duration) float64 { return d.Seconds() }
