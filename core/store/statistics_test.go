package store

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/internal/plantest"
)

// A fleet's tables analyzed while empty and filled again are analyzed again
// once they hold enough rows; tables sized right, tables below the floor and
// a call while another member holds the guard's lock analyze nothing, and a
// table another session holds ANALYZE's lock on is left without a wait.
func TestAnalyzeUndersized(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, applyFixtureKinds(ctx, e.store))
	require.NoError(t, loadFixture(ctx, e.pool, 0, 2000))
	_, err := e.pool.Exec(ctx, `ANALYZE`)
	require.NoError(t, err)
	tables, err := e.store.AnalyzeUndersized(ctx, 1000)
	require.NoError(t, err)
	require.Empty(t, tables, "statistics taken over the rows size every table right")

	fleet := []string{"resources", "resource_phases", "resource_labels"}
	for _, table := range fleet {
		// autovacuum's own ANALYZE of the refilled tables (its next round
		// comes within a minute) would leave the guard nothing to do
		_, err := e.pool.Exec(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = false)`)
		require.NoError(t, err)
	}
	plantest.AnalyzeEmptied(t, e.pool, fleet...)
	sized := func(table string) (reltuples float64, live int64) {
		t.Helper()
		require.NoError(t, e.pool.QueryRow(ctx, `
SELECT c.reltuples, s.n_live_tup FROM pg_class c JOIN pg_stat_all_tables s ON s.relid = c.oid
 WHERE c.oid = to_regclass($1)`, table).Scan(&reltuples, &live))
		return reltuples, live
	}
	// The rows put back reach the live counts when their session's
	// statistics are flushed (within a second of it going idle).
	require.Eventually(t, func() bool {
		for _, table := range fleet {
			if reltuples, live := sized(table); reltuples != 0 || live < 2000 {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "the tables are sized at zero rows over their live rows")

	tables, err = e.store.AnalyzeUndersized(ctx, 1_000_000)
	require.NoError(t, err)
	require.Empty(t, tables, "no table holds the floor's rows")

	tx, err := e.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('analyze_undersized'))`)
	require.NoError(t, err)
	tables, err = e.store.AnalyzeUndersized(ctx, 1000)
	require.NoError(t, err)
	require.Empty(t, tables, "another member is analyzing")
	require.NoError(t, tx.Rollback(ctx))

	// A table another session holds ANALYZE's lock on (autovacuum's pass,
	// most often) is left, without waiting for it; the rest are analyzed.
	tx, err = e.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE resources IN SHARE UPDATE EXCLUSIVE MODE`)
	require.NoError(t, err)
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	tables, err = e.store.AnalyzeUndersized(waitCtx, 1000)
	cancel()
	require.NoError(t, err, "the call does not wait for the lock")
	require.Subset(t, tables, []string{"resource_labels", "resource_phases"})
	require.NotContains(t, tables, "resources")
	require.NoError(t, tx.Rollback(ctx))
	reltuples, _ := sized("resources")
	require.Zero(t, reltuples, "the locked table is left as it was")

	tables, err = e.store.AnalyzeUndersized(ctx, 1000)
	require.NoError(t, err)
	require.Contains(t, tables, "resources")
	for _, table := range fleet {
		reltuples, live := sized(table)
		require.Greater(t, reltuples, float64(live)/2, "%s is analyzed again", table)
	}
	tables, err = e.store.AnalyzeUndersized(ctx, 1000)
	require.NoError(t, err)
	require.Empty(t, tables, "once analyzed, nothing is undersized")
}

// The benchmark's -again window: the fleet's tables analyzed as a teardown
// left them (every row dead, the pages kept) are sized at zero rows, and the
// call names them; analyzed over live rows, none is.
func TestAnalyzeFleetTables_NamesTheTablesLeftSizedAtZero(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, applyFixtureKinds(ctx, e.store))
	require.NoError(t, loadFixture(ctx, e.pool, 0, 500))
	zero, err := e.store.AnalyzeFleetTables(ctx)
	require.NoError(t, err)
	require.Empty(t, zero, "analyzed over live rows")

	for _, table := range []string{"resources", "resource_phases", "resource_labels"} {
		// autovacuum would truncate the emptied pages under the test
		_, err := e.pool.Exec(ctx, `ALTER TABLE `+table+` SET (autovacuum_enabled = false)`)
		require.NoError(t, err)
	}
	// The fleet torn down, in one session with triggers off: the rows go,
	// their pages stay.
	_, err = e.pool.Exec(ctx, `SET session_replication_role = replica;
DELETE FROM resource_labels; DELETE FROM resource_phases; DELETE FROM resources;
RESET session_replication_role`)
	require.NoError(t, err)
	zero, err = e.store.AnalyzeFleetTables(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"resource_labels", "resource_phases", "resources"}, zero)
}
