// Package maintenance is the Go face of the reaper's plpgsql passes
// (db/migrations/00003_maintenance.sql): dead-lease recovery, abandoned-work
// GC, crash catch-up, drift resync, orphan expiry, the delete sweep, the
// concurrency-cap recount and the reactor-delivery reaper, and the event
// log's pruning (events.go). Each shard pass runs over one contiguous shard
// range (a shard.Range; every pass filters shard_id BETWEEN Lo AND Last() so
// the planner prunes the partitioned queue tables to the partitions that
// hold it) and returns how many rows it moved; the control plane's reaper
// decides when to call which. The event log is not sharded: its pruning
// takes the log's head, whichever pod runs it.
//
// The passes read the clock of the database (now()) unless a clock is
// injected with WithClock, which tests use to drive time.
package maintenance

import (
	"context"
	"time"

	"github.com/converge-run/converge/core/store/internal/dbx"
)

// DB is a pgx pool, connection or transaction (the store's one querier).
type DB = dbx.Querier

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

// NotifyWorkReady sends work_ready in a statement of its own. The passes
// that pend work announce it through notify_gated, which decides before the
// pass commits; the reaper and resyncer call this after a pass that moved
// rows committed, so no pend waits for a dispatcher's idle poll.
func (s *Store) NotifyWorkReady(ctx context.Context) error {
	_, err := s.db.Exec(ctx, `SELECT pg_notify('work_ready', '')`)
	return dbx.Wrap(err, "notify work_ready")
}
