package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// The server's own statistics, read by the benchmarks (examples/stack):
// Seq Scans, buffers and write-ahead log since the cluster started,
// pg_stat_statements, autovacuum's workers; and a forced checkpoint between
// runs. Converge itself never calls these.

// TableScans is one table's Seq Scans since the cluster started and the
// rows they read.
type TableScans struct {
	Scans, Rows int64
}

// FleetSeqScans reads the Seq Scan counters (pg_stat_user_tables) of the
// tables a fleet grows (resources, resource_phases, resource_labels,
// resource_deps) and of the queue's and the outbox's partitions
// (work_queue_pN, work_outbox_pN), by table name; the catalog-sized tables
// beside them are left out, scanning those is the cheap plan. The counters
// are the server's cumulative statistics, which a busy backend flushes at
// most once a second and an idle one within ten seconds.
func (s *Store) FleetSeqScans(ctx context.Context) (map[string]TableScans, error) {
	rows, err := s.primary.Query(ctx, `
SELECT relname::text, seq_scan, seq_tup_read
  FROM pg_stat_user_tables
 WHERE relname IN ('resources', 'resource_phases', 'resource_labels', 'resource_deps')
    OR relname ~ '^work_(queue|outbox)_p[0-9]+$'`)
	if err != nil {
		return nil, mapErr(err, "read the tables' seq scan counters")
	}
	tables := map[string]TableScans{}
	var name string
	var t TableScans
	if _, err := pgx.ForEachRow(rows, []any{&name, &t.Scans, &t.Rows}, func() error {
		tables[name] = t
		return nil
	}); err != nil {
		return nil, mapErr(err, "read the tables' seq scan counters")
	}
	return tables, nil
}

// BuffersTouched is how many buffers the database's backends have read since
// the cluster started, found in shared buffers or read in
// (pg_stat_database's blks_hit + blks_read), flushed as the Seq Scan counters
// are.
func (s *Store) BuffersTouched(ctx context.Context) (int64, error) {
	var n int64
	err := s.primary.QueryRow(ctx, `
SELECT (blks_hit + blks_read)::bigint FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	if err != nil {
		return 0, mapErr(err, "read the database's buffer counters")
	}
	return n, nil
}

// WALCounters are what the cluster has written to its write-ahead log since
// it started (pg_stat_wal).
type WALCounters struct {
	// Records are the log's records: one per heap row written or locked,
	// one per index entry, one per commit, and so on.
	Records int64
	// FPI are full-page images: the first change to a page after a
	// checkpoint logs the whole page.
	FPI int64
	// Bytes is the log's size, images included.
	Bytes int64
}

// WALWritten reads the cluster's write-ahead log counters (every process's:
// backends, autovacuum, the checkpointer).
func (s *Store) WALWritten(ctx context.Context) (WALCounters, error) {
	var w WALCounters
	err := s.primary.QueryRow(ctx, `SELECT wal_records, wal_fpi, wal_bytes::bigint FROM pg_stat_wal`).
		Scan(&w.Records, &w.FPI, &w.Bytes)
	if err != nil {
		return WALCounters{}, mapErr(err, "read the write-ahead log's counters")
	}
	return w, nil
}

// Checkpoint forces a checkpoint.
func (s *Store) Checkpoint(ctx context.Context) error {
	if _, err := s.primary.Exec(ctx, "CHECKPOINT"); err != nil {
		return mapErr(err, "checkpoint")
	}
	return nil
}

// AutovacuumWorkers counts the autovacuum workers running on the cluster.
func (s *Store) AutovacuumWorkers(ctx context.Context) (int, error) {
	var n int
	err := s.primary.QueryRow(ctx, `
SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'`).Scan(&n)
	if err != nil {
		return 0, mapErr(err, "count autovacuum workers")
	}
	return n, nil
}

// StatementStat is one statement's totals from pg_stat_statements.
type StatementStat struct {
	// TopLevel is false for a statement run inside a function (its time is
	// also in the calling statement's).
	TopLevel   bool
	Calls      int64
	Rows       int64
	Exec, Plan time.Duration
	// Buffers is shared blocks hit plus read: the work a statement did,
	// which, unlike its time, a busy machine does not inflate.
	Buffers int64
	// WALBytes is the write-ahead log the statement wrote (its nested
	// statements' and triggers' included).
	WALBytes int64
	Query    string
}

// ResetStatements creates pg_stat_statements in the database (the server
// must preload it: shared_preload_libraries) and zeroes its totals.
func (s *Store) ResetStatements(ctx context.Context) error {
	if _, err := s.primary.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return mapErr(err, "create pg_stat_statements (is it preloaded?)")
	}
	if _, err := s.primary.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		return mapErr(err, "reset pg_stat_statements (is it preloaded?)")
	}
	return nil
}

// Statements returns every statement of the database since ResetStatements,
// the most execution + planning time first. The times are wall times inside
// the server (lock and I/O waits, and waits for a CPU on a busy machine,
// included), not CPU.
func (s *Store) Statements(ctx context.Context) ([]StatementStat, error) {
	rows, err := s.primary.Query(ctx, `
SELECT toplevel, calls, rows, total_exec_time, total_plan_time, shared_blks_hit + shared_blks_read,
       wal_bytes::bigint, regexp_replace(query, '\s+', ' ', 'g')
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
 ORDER BY total_exec_time + total_plan_time DESC`)
	if err != nil {
		return nil, mapErr(err, "read pg_stat_statements")
	}
	var out []StatementStat
	var st StatementStat
	var execMS, planMS float64
	if _, err := pgx.ForEachRow(rows, []any{&st.TopLevel, &st.Calls, &st.Rows, &execMS, &planMS, &st.Buffers, &st.WALBytes, &st.Query},
		func() error {
			st.Exec = time.Duration(execMS * float64(time.Millisecond))
			st.Plan = time.Duration(planMS * float64(time.Millisecond))
			out = append(out, st)
			return nil
		}); err != nil {
		return nil, mapErr(err, "read pg_stat_statements")
	}
	return out, nil
}
