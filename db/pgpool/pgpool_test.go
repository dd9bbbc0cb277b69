package pgpool_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/pgpool"
	"github.com/converge-run/converge/db/pgtest"
)

// Every session of a pool built by Config runs with SessionParams, and a
// parameter the URL sets wins over ours.
func TestConfig_SessionParams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t) // built from pgpool.Config
	var jit, idle string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_setting('jit'), current_setting('idle_in_transaction_session_timeout')`).
		Scan(&jit, &idle))
	require.Equal(t, "off", jit)
	require.Equal(t, "1min", idle)

	cfg, err := pgpool.Config(urlWith(t, "jit", "on"), 2)
	require.NoError(t, err)
	own, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer own.Close()
	require.NoError(t, own.QueryRow(ctx, `SELECT current_setting('jit')`).Scan(&jit))
	require.Equal(t, "on", jit, "the URL's own setting is kept")
}

// A transaction whose client went quiet is ended by the server, and the row
// locks it held go with it (the timeout shortened to a second for the test;
// ours is a minute).
func TestConfig_AnAbandonedTransactionReleasesItsLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgpool.Config(urlWith(t, "idle_in_transaction_session_timeout", "1s"), 4)
	require.NoError(t, err)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(ctx, `CREATE TABLE held (id int PRIMARY KEY); INSERT INTO held VALUES (1)`)
	require.NoError(t, err)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM held WHERE id = 1 FOR UPDATE`)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// The holder now says nothing, as a partitioned member would.

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	started := time.Now()
	_, err = pool.Exec(wctx, `UPDATE held SET id = 1 WHERE id = 1`)
	require.NoError(t, err, "the waiting writer gets the row once the idle holder is ended")
	require.Less(t, time.Since(started), 15*time.Second)
	_, err = tx.Exec(ctx, `SELECT 1`)
	require.Error(t, err, "the abandoned transaction's session is gone")
}

// A session of ours keeps no statement, so it can keep no generic plan: a
// point read called past the five calls after which Postgres would switch a
// prepared statement to its generic plan leaves nothing in the session's
// pg_prepared_statements. The same calls on pgx's own default (named
// statements, kept) do leave one there, on its generic plan — the plan a
// statement would then keep, made here on an empty table, while the table
// grows. A URL that names its own mode keeps it.
func TestConfig_NoSessionKeepsAStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	kept := func(dbURL string) (statements, generic int) {
		cfg, err := pgpool.Config(dbURL, 1)
		require.NoError(t, err)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer pool.Close()
		_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS points (id int PRIMARY KEY, v int); ANALYZE points`)
		require.NoError(t, err)
		for i := range 10 {
			var v int
			err := pool.QueryRow(ctx, `SELECT v FROM points WHERE id = $1`, i).Scan(&v)
			require.ErrorIs(t, err, pgx.ErrNoRows)
		}
		require.NoError(t, pool.QueryRow(ctx,
			`SELECT count(*), coalesce(sum(generic_plans), 0) FROM pg_prepared_statements WHERE statement LIKE 'SELECT v %'`).
			Scan(&statements, &generic))
		return statements, generic
	}

	n, _ := kept(pgtest.URL(t))
	require.Zero(t, n, "a pool built by Config sends unnamed statements, planned per call")

	n, generic := kept(urlWith(t, "default_query_exec_mode", "cache_statement"))
	require.Equal(t, 1, n, "the URL's own mode is kept: pgx's named, cached statement")
	require.Positive(t, generic, "and Postgres has switched it to the generic plan a session keeps")
}

// urlWith is a fresh test database's URL with one run-time parameter set.
func urlWith(t *testing.T, param, value string) string {
	t.Helper()
	u, err := url.Parse(pgtest.URL(t))
	require.NoError(t, err)
	q := u.Query()
	q.Set(param, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// A pool size the URL names (pool_max_conns) is the operator's: it wins over
// the size the caller asks for, as the URL's session settings do.
func TestConfig_URLPoolSizeWins(t *testing.T) {
	t.Parallel()
	cfg, err := pgpool.Config("postgres://converge@db.internal/converge?pool_max_conns=12", 40)
	require.NoError(t, err)
	require.EqualValues(t, 12, cfg.MaxConns, "the URL's pool_max_conns is kept")
	cfg, err = pgpool.Config("postgres://converge@db.internal/converge", 40)
	require.NoError(t, err)
	require.EqualValues(t, 40, cfg.MaxConns, "without one, the caller's size")
	_, err = pgpool.Config("postgres://converge@db.internal/converge?pool_max_conns=2", 40)
	require.ErrorContains(t, err, "pool_max_conns=2: want at least 10", "a pool the process's own sessions would exhaust is refused, naming the limit")
}
