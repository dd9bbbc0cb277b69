package stack

import (
	"context"

	"github.com/converge-run/converge/core/store"
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
type StatementStat = store.StatementStat

// ResetStatements creates pg_stat_statements in the converge database
// (the cluster must run with StatementSettings) and zeroes its totals.
func (s *Stack) ResetStatements(ctx context.Context) error {
	return s.Store.ResetStatements(ctx)
}

// Statements returns every statement of the converge database since
// ResetStatements, the most execution + planning time first. The times are
// wall times inside the server (lock and I/O waits, and waits for a CPU
// on a busy machine, included), not CPU.
func (s *Stack) Statements(ctx context.Context) ([]StatementStat, error) {
	return s.Store.Statements(ctx)
}
