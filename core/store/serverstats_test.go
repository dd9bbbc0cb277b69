package store

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/pgtest"
)

// The benchmarks' counters read the fleet's tables only (a Seq Scan of one
// shows in its counters once the session's statistics are flushed), the
// buffers and the write-ahead log only grow, a checkpoint is taken and
// autovacuum's workers are counted.
func TestServerStats_ReadTheCountersTheBenchmarksCompare(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	before, err := e.store.FleetSeqScans(ctx)
	require.NoError(t, err)
	require.Contains(t, before, "resources")
	require.Contains(t, before, "work_queue_p0", "the queue's partitions are read")
	require.Contains(t, before, "work_outbox_p0", "the outbox's partitions are read")
	for name := range before {
		require.True(t, strings.HasPrefix(name, "resource") || strings.HasPrefix(name, "work_"),
			"%s is not a fleet table", name)
	}
	buffers, err := e.store.BuffersTouched(ctx)
	require.NoError(t, err)
	wal, err := e.store.WALWritten(ctx)
	require.NoError(t, err)

	conn, err := e.pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO cluster_members (member_id, role) VALUES ('m', 'broker')`)
	require.NoError(t, err)
	// The backend flushes its statistics as it goes idle, before it answers.
	_, err = conn.Exec(ctx, `SET enable_indexscan = off; SET enable_bitmapscan = off;
SELECT count(*) FROM resources; SELECT pg_stat_force_next_flush()`)
	conn.Release()
	require.NoError(t, err)

	after, err := e.store.FleetSeqScans(ctx)
	require.NoError(t, err)
	require.Greater(t, after["resources"].Scans, before["resources"].Scans, "the Seq Scan of resources is counted")
	n, err := e.store.BuffersTouched(ctx)
	require.NoError(t, err)
	require.Greater(t, n, buffers)
	w, err := e.store.WALWritten(ctx)
	require.NoError(t, err)
	require.Greater(t, w.Records, wal.Records, "the insert wrote to the log")
	require.GreaterOrEqual(t, w.Bytes, wal.Bytes)

	require.NoError(t, e.store.Checkpoint(ctx))
	workers, err := e.store.AutovacuumWorkers(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, workers, 0)
}

// pg_stat_statements needs the server to preload it: without, the reset says
// so; with it, the statements since the reset are read, the costliest first.
func TestServerStats_Statements(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	err := e.store.ResetStatements(ctx)
	require.ErrorContains(t, err, "is it preloaded?", "the tests' server does not preload pg_stat_statements")

	url := pgtest.BenchURL(t, map[string]string{
		"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all",
		"pg_stat_statements.track_planning": "on",
	})
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := New(pool, nil)
	require.NoError(t, s.ResetStatements(ctx))
	_, err = pool.Exec(ctx, `SELECT pg_sleep(0.05), 'marker-one'`)
	require.NoError(t, err)
	stats, err := s.Statements(ctx)
	require.NoError(t, err)
	var found bool
	for i, st := range stats {
		if i > 0 {
			require.LessOrEqual(t, st.Exec+st.Plan, stats[i-1].Exec+stats[i-1].Plan, "the costliest first")
		}
		if strings.Contains(st.Query, "pg_sleep") {
			found = true
			require.Equal(t, int64(1), st.Calls)
			require.True(t, st.TopLevel)
			require.GreaterOrEqual(t, st.Exec.Milliseconds(), int64(50))
		}
	}
	require.True(t, found, "the statement run since the reset is read: %+v", stats)
}
