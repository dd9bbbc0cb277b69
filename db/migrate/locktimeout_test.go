package migrate_test

import (
	"context"
	"fmt"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/functions"
	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/pgtest"
)

// lockFS is a two-step schema: a table, then migration 2 (body).
func lockFS(second string) fstest.MapFS {
	return fstest.MapFS{
		"00001_t.sql": {Data: []byte("-- +goose Up\nCREATE TABLE t (id int);\n\n-- +goose Down\nDROP TABLE t;\n")},
		"00002_x.sql": {Data: []byte(second)},
	}
}

// waitingFor waits until a session of the test's database waits for a
// lock while running a statement that starts with prefix.
func waitingFor(t *testing.T, url, prefix string) {
	t.Helper()
	probe := connect(t, url)
	require.Eventually(t, func() bool {
		var n int
		err := probe.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		    WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE $1 || '%'`, prefix).Scan(&n)
		return err == nil && n > 0
	}, 30*time.Second, 10*time.Millisecond, "a session waits for a lock in %q", prefix)
}

// TestUp_AMigrationBehindALongTransactionDoesNotStallTheTablesTraffic: a
// migration's ALTER TABLE queues for an ACCESS EXCLUSIVE lock behind a
// transaction that reads the table, and every statement on the table then
// queues behind the ALTER — a whole fleet's writes, for as long as that
// transaction runs. The migration waits at most its lock timeout, rolls
// back (letting the queue through), and tries again; it applies once the
// transaction ends.
func TestUp_AMigrationBehindALongTransactionDoesNotStallTheTablesTraffic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	createTable(t, url)

	tx := readTableInATransaction(t, url)

	r, err := migrate.OpenWith(url, migrate.Options{
		Migrations:  lockFS("-- +goose Up\nALTER TABLE t ADD COLUMN c int;\n\n-- +goose Down\nALTER TABLE t DROP COLUMN c;\n"),
		LockTimeout: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r.Up(ctx)
		done <- err
	}()
	waitingFor(t, url, "ALTER TABLE t")

	// The table's traffic: an insert that arrives while the ALTER waits.
	writeCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	_, err = connect(t, url).Exec(writeCtx, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err, "a write to the table goes through while the migration waits for a long transaction")
	select {
	case err := <-done:
		t.Fatalf("the migration ended while the long transaction holds its table: %v", err)
	default:
	}

	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-done, "the migration applies once the long transaction ends")
	var has bool
	require.NoError(t, connect(t, url).QueryRow(ctx,
		`SELECT EXISTS (SELECT FROM information_schema.columns WHERE table_name = 't' AND column_name = 'c')`).Scan(&has))
	require.True(t, has)
}

// TestUp_AConcurrentIndexBuildOutwaitsALongTransaction: a build
// CONCURRENTLY waits for every older transaction to end, and blocks nobody
// while it does; the lock timeout does not apply to it (it would fail the
// build and leave an invalid index behind whenever a transaction ran
// longer than the timeout).
func TestUp_AConcurrentIndexBuildOutwaitsALongTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	const lockTimeout = 200 * time.Millisecond
	createTable(t, url)

	// A snapshot held open (a report, a dump): the build waits for it.
	long := connect(t, url)
	tx, err := long.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT count(*) FROM t`)
	require.NoError(t, err)

	r, err := migrate.OpenWith(url, migrate.Options{
		Migrations: lockFS("-- +goose NO TRANSACTION\n-- +goose Up\nCREATE INDEX CONCURRENTLY idx_t ON t (id);\n\n" +
			"-- +goose Down\nDROP INDEX CONCURRENTLY IF EXISTS idx_t;\n"),
		LockTimeout: lockTimeout,
	})
	require.NoError(t, err)
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r.Up(ctx)
		done <- err
	}()
	waitingFor(t, url, "CREATE INDEX CONCURRENTLY")
	probe := connect(t, url)
	require.Eventually(t, func() bool {
		var n int
		err := probe.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		    WHERE datname = current_database() AND wait_event_type = 'Lock'
		      AND query LIKE 'CREATE INDEX CONCURRENTLY%' AND clock_timestamp() - query_start > $1::interval`,
			fmt.Sprintf("%d milliseconds", 5*lockTimeout.Milliseconds())).Scan(&n)
		return err == nil && n > 0
	}, 30*time.Second, 10*time.Millisecond, "the build still waits, five lock timeouts after it began")

	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-done)
	var valid bool
	require.NoError(t, connect(t, url).QueryRow(ctx,
		`SELECT indisvalid FROM pg_index WHERE indexrelid = 'idx_t'::regclass`).Scan(&valid))
	require.True(t, valid)
}

// fnSet is a one-function set: f() as body, at version v.
func fnSet(v int64, body string) *functions.Set {
	files := []functions.File{{Name: "f.sql", SQL: "CREATE OR REPLACE FUNCTION f() RETURNS bigint LANGUAGE sql AS $$ " + body + " $$;"}}
	return &functions.Set{Version: v, Checksum: functions.Sum(files), Files: files}
}

// TestUp_AChangedFunctionBodyWaitsForTheSchemaItReads: a release changes a
// function to read a column its migration adds. While that migration waits
// for its table (behind a long transaction, retrying), the database runs
// the body that matches its schema — the old one — and takes the new body
// once the column exists: with the new body in place first, every call
// failed ("column does not exist") for as long as the migration waited.
func TestUp_AChangedFunctionBodyWaitsForTheSchemaItReads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	old, err := migrate.OpenWith(url, migrate.Options{
		Migrations: fstest.MapFS{"00001_t.sql": lockFS("")["00001_t.sql"]},
		Functions:  fnSet(1, "SELECT count(*) FROM t"),
	})
	require.NoError(t, err)
	_, err = old.Up(ctx)
	require.NoError(t, err)
	require.NoError(t, old.Close())

	tx := readTableInATransaction(t, url)

	r, err := migrate.OpenWith(url, migrate.Options{
		Migrations:  lockFS("-- +goose Up\nALTER TABLE t ADD COLUMN c int NOT NULL DEFAULT 7;\n\n-- +goose Down\nALTER TABLE t DROP COLUMN c;\n"),
		Functions:   fnSet(2, "SELECT coalesce(sum(c), 0) FROM t"),
		LockTimeout: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r.Up(ctx)
		done <- err
	}()
	waitingFor(t, url, "ALTER TABLE t")

	callCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	caller := connect(t, url)
	_, err = caller.Exec(callCtx, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	var n int64
	require.NoError(t, caller.QueryRow(callCtx, `SELECT f()`).Scan(&n),
		"the function works while its release's migration waits")
	require.Equal(t, int64(1), n, "the old body: the column is not there yet")

	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-done)
	require.NoError(t, caller.QueryRow(ctx, `SELECT f()`).Scan(&n))
	require.Equal(t, int64(7), n, "the new body once its column exists")
	rec, err := r.FunctionSet(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), rec.Version)
}

// TestUp_ARunWhoseLockSessionIsGoneStops: the migration lock lives in a
// session of its own that sits idle while the migrations run on another.
// If that session goes (an idle timeout of a proxy or of the server, an
// admin's pg_terminate_backend) the lock goes with it and another pod's run
// takes it: two runs would apply the same migration at once. The run
// notices within LockCheck and stops.
func TestUp_ARunWhoseLockSessionIsGoneStops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	createTable(t, url)

	readTableInATransaction(t, url) // held until the test ends

	r, err := migrate.OpenWith(url, migrate.Options{
		Migrations:  lockFS("-- +goose Up\nALTER TABLE t ADD COLUMN c int;\n\n-- +goose Down\nALTER TABLE t DROP COLUMN c;\n"),
		LockTimeout: 200 * time.Millisecond,
	})
	require.NoError(t, err)
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r.Up(ctx)
		done <- err
	}()
	waitingFor(t, url, "ALTER TABLE t")

	var terminated bool
	require.NoError(t, connect(t, url).QueryRow(ctx, `SELECT bool_or(pg_terminate_backend(l.pid)) FROM pg_locks l
	    JOIN pg_database d ON d.oid = l.database
	    WHERE l.locktype = 'advisory' AND l.granted AND d.datname = current_database()`).Scan(&terminated))
	require.True(t, terminated, "the lock's session terminated")
	select {
	case err := <-done:
		require.ErrorContains(t, err, "migration lock")
	case <-time.After(migrate.LockCheck + 20*time.Second):
		t.Fatal("the run went on migrating without its lock")
	}
}

// TestUp_IgnoresTheSessionTimeoutsTheDatabaseSets: a production role or
// database often sets statement_timeout and lock_timeout for its
// applications (or the URL does). A migration is no runaway query: a
// backfill or an index build CONCURRENTLY on a large table outlasts such a
// timeout on every boot, leaving an invalid index each time. The runner's
// sessions run without them (transactional migrations keep LockTimeout).
func TestUp_IgnoresTheSessionTimeoutsTheDatabaseSets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	admin := connect(t, url)
	var db string
	require.NoError(t, admin.QueryRow(ctx, `SELECT current_database()`).Scan(&db))
	for _, set := range []string{"statement_timeout = '300ms'", "lock_timeout = '300ms'"} {
		_, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{db}.Sanitize()+" SET "+set)
		require.NoError(t, err)
	}
	createTable(t, url)

	long := connect(t, url)
	tx, err := long.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT count(*) FROM t`)
	require.NoError(t, err)

	fsys := lockFS("-- +goose Up\nSELECT pg_sleep(1);\n\n-- +goose Down\nSELECT 1;\n")
	fsys["00003_ix.sql"] = &fstest.MapFile{Data: []byte("-- +goose NO TRANSACTION\n-- +goose Up\n" +
		"CREATE INDEX CONCURRENTLY idx_t ON t (id);\n\n-- +goose Down\nDROP INDEX CONCURRENTLY IF EXISTS idx_t;\n")}
	r, err := migrate.OpenFS(url, fsys, nil)
	require.NoError(t, err)
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r.Up(ctx)
		done <- err
	}()
	probe := connect(t, url)
	require.Eventually(t, func() bool {
		select {
		case err := <-done:
			done <- err
			return true
		default:
		}
		var n int
		err := probe.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		    WHERE datname = current_database() AND wait_event_type = 'Lock'
		      AND query LIKE 'CREATE INDEX CONCURRENTLY%' AND clock_timestamp() - query_start > interval '1.5 seconds'`).Scan(&n)
		return err == nil && n > 0
	}, 30*time.Second, 10*time.Millisecond, "the build waits past the database's lock timeout")
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, <-done, "a migration longer than the database's statement timeout, and a build that waited past its lock timeout, apply")
	var valid bool
	require.NoError(t, probe.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = 'idx_t'::regclass`).Scan(&valid))
	require.True(t, valid)
}

// createTable applies lockFS's first migration, the table t, on url.
func createTable(t *testing.T, url string) {
	t.Helper()
	first, err := migrate.OpenFS(url, fstest.MapFS{"00001_t.sql": lockFS("")["00001_t.sql"]}, nil)
	require.NoError(t, err)
	_, err = first.Up(t.Context())
	require.NoError(t, err)
	require.NoError(t, first.Close())
}

// readTableInATransaction opens a transaction that has read t, so it holds
// a lock every ALTER TABLE t queues behind until the test ends or rolls it
// back.
func readTableInATransaction(t *testing.T, url string) pgx.Tx {
	t.Helper()
	ctx := t.Context()
	tx, err := connect(t, url).Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	_, err = tx.Exec(ctx, `SELECT count(*) FROM t`)
	require.NoError(t, err)
	return tx
}
