package stack

import (
	"context"
	"fmt"
	"time"
)

// StatementSettings are the Postgres settings Statements needs: add them to
// Options.PGSettings. Tracking costs a little on every statement, so a
// benchmark turns it on only when asked.
func StatementSettings() map[string]string {
	return map[string]string{
		"shared_preload_libraries":          "pg_stat_statements",
		"pg_stat_statements.track":          "all", // statements inside plpgsql functions too
		"pg_stat_statements.track_planning": "on",
		"pg_stat_statements.max":            "10000",
	}
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

// ResetStatements creates pg_stat_statements in the converge database
// (the cluster must run with StatementSettings) and zeroes its totals.
func (s *Stack) ResetStatements(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return fmt.Errorf("create pg_stat_statements (is it preloaded?): %w", err)
	}
	if _, err := s.pool.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		return fmt.Errorf("reset pg_stat_statements: %w", err)
	}
	return nil
}

// Statements returns every statement of the converge database since
// ResetStatements, the most execution + planning time first. The times are
// wall times inside the server (lock and I/O waits, and waits for a CPU
// on a busy machine, included), not CPU.
func (s *Stack) Statements(ctx context.Context) ([]StatementStat, error) {
	rows, err := s.pool.Query(ctx, `
SELECT toplevel, calls, rows, total_exec_time, total_plan_time, shared_blks_hit + shared_blks_read, wal_bytes::bigint, regexp_replace(query, '\s+', ' ', 'g')
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
 ORDER BY total_exec_time + total_plan_time DESC`)
	if err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	defer rows.Close()
	var out []StatementStat
	for rows.Next() {
		var st StatementStat
		var execMS, planMS float64
		if err := rows.Scan(&st.TopLevel, &st.Calls, &st.Rows, &execMS, &planMS, &st.Buffers, &st.WALBytes, &st.Query); err != nil {
			return nil, fmt.Errorf("read pg_stat_statements: %w", err)
		}
		st.Exec = time.Duration(execMS * float64(time.Millisecond))
		st.Plan = time.Duration(planMS * float64(time.Millisecond))
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pg_stat_statements: %w", err)
	}
	return out, nil
}
