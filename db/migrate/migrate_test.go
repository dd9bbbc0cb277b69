package migrate_test

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/functions"
	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/migrations"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	return conn
}

func tableCount(t *testing.T, url string) int {
	t.Helper()
	var n int
	require.NoError(t, connect(t, url).QueryRow(context.Background(),
		`SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		  WHERE n.nspname = 'public' AND c.relkind IN ('r','p') AND c.relname <> 'goose_db_version'`).Scan(&n))
	return n
}

func functionCount(t *testing.T, url string) int {
	t.Helper()
	var n int
	require.NoError(t, connect(t, url).QueryRow(context.Background(),
		`SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace`).Scan(&n))
	return n
}

func TestMigrate_UpDownUpRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	r, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer r.Close()
	set, err := functions.Embedded()
	require.NoError(t, err)

	rep, err := r.Up(ctx)
	require.NoError(t, err)
	require.Positive(t, rep.Migrations)
	require.Equal(t, migrate.FunctionsApplied, rep.Functions.Action)
	require.Equal(t, set.Version, rep.Functions.Recorded)
	top, err := r.Version(ctx)
	require.NoError(t, err)
	tables := tableCount(t, url)
	require.Greater(t, tables, 10, "schema creates its tables")
	require.Equal(t, len(set.Files), functionCount(t, url), "one function per file")

	require.NoError(t, r.DownTo(ctx, 0))
	v, err := r.Version(ctx)
	require.NoError(t, err)
	require.Zero(t, v)
	require.Zero(t, tableCount(t, url), "down removes every table, the function set record included")
	require.Zero(t, functionCount(t, url), "down removes every function")
	rec, err := r.FunctionSet(ctx)
	require.NoError(t, err)
	require.Zero(t, rec.Version, "down forgets the function set")

	rep, err = r.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, migrate.FunctionsApplied, rep.Functions.Action, "up after down applies the functions again")
	v, err = r.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, top, v)
	require.Equal(t, tables, tableCount(t, url), "up after down rebuilds the same schema")
	require.Equal(t, len(set.Files), functionCount(t, url))
}

func TestMigrate_ConcurrentBootAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	const pods = 5
	reports := make([]migrate.Report, pods)
	errs := make([]error, pods)
	var wg sync.WaitGroup
	for i := range pods {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := migrate.Open(url, nil)
			if err != nil {
				errs[i] = err
				return
			}
			defer r.Close()
			reports[i], errs[i] = r.Up(ctx)
		}()
	}
	wg.Wait()
	total, winners, fnWinners := 0, 0, 0
	for i := range pods {
		require.NoError(t, errs[i], "migrator %d", i)
		total += reports[i].Migrations
		if reports[i].Migrations > 0 {
			winners++
		}
		switch reports[i].Functions.Action {
		case migrate.FunctionsApplied:
			fnWinners++
		case migrate.FunctionsUnchanged:
		default:
			t.Fatalf("migrator %d: function set %s", i, reports[i].Functions.Action)
		}
	}
	require.Equal(t, 1, winners, "exactly one booting pod applies the migrations")
	require.Equal(t, 1, fnWinners, "exactly one booting pod applies the function set")

	r, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer r.Close()
	v, err := r.Version(ctx)
	require.NoError(t, err)
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.Equal(t, len(files), total, "every migration applied exactly once")
	last, err := strconv.Atoi(strings.SplitN(files[len(files)-1], "_", 2)[0])
	require.NoError(t, err)
	require.Equal(t, int64(last), v, "up to the newest (numbers may skip: branches take theirs in advance)")
	var rows int
	require.NoError(t, connect(t, url).QueryRow(ctx, `SELECT count(*) FROM converge_function_set`).Scan(&rows))
	require.Equal(t, 1, rows, "the function set recorded once")
}

// TestMigrate_HoldsTheLockAcrossFunctionsAndDDL: a run that finds the lock
// held (another pod mid-migrate) applies nothing — neither the function set
// nor a migration — until it is released.
func TestMigrate_HoldsTheLockAcrossFunctionsAndDDL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	holder := connect(t, url)
	_, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrate.LockID)
	require.NoError(t, err)

	r, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r.Up(ctx)
		done <- err
	}()

	probe := connect(t, url)
	require.Eventually(t, func() bool {
		// The run asks for the lock, finds it held and asks again later: a
		// session of this database whose last statement was that ask, idle
		// (no transaction left open while it waits).
		var waiting int
		err := probe.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		                             WHERE datname = current_database() AND state = 'idle'
		                               AND query LIKE 'SELECT pg_try_advisory_lock%'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 30*time.Second, 10*time.Millisecond, "the run waits for the lock")
	var fnTable, schema bool
	require.NoError(t, probe.QueryRow(ctx,
		`SELECT to_regclass('converge_function_set') IS NOT NULL, to_regclass('resources') IS NOT NULL`).Scan(&fnTable, &schema))
	require.False(t, fnTable, "no function set applied while another run holds the lock")
	require.False(t, schema, "no migration applied while another run holds the lock")

	_, err = holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, migrate.LockID)
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.Positive(t, tableCount(t, url))
}

// TestStatus_SaysWhenTheDatabaseIsAheadOfThisBinary: an older binary's
// status (a rolled-back pod, an old image's migrate status) lists the
// migrations it knows as applied, and says that the database has one it
// does not know, so nobody reads "all applied" as "at this release".
func TestStatus_SaysWhenTheDatabaseIsAheadOfThisBinary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	newer, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer newer.Close()
	_, err = newer.Up(ctx)
	require.NoError(t, err)
	top, err := newer.Version(ctx)
	require.NoError(t, err)

	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	older := fstest.MapFS{}
	for _, f := range files[:len(files)-1] {
		b, err := fs.ReadFile(migrations.FS, f)
		require.NoError(t, err)
		older[f] = &fstest.MapFile{Data: b}
	}
	r, err := migrate.OpenFS(url, older, nil)
	require.NoError(t, err)
	defer r.Close()
	var out strings.Builder
	require.NoError(t, r.Status(ctx, &out))
	require.Contains(t, out.String(), fmt.Sprintf("the database is at migration %d, newer than this binary's %s", top,
		strings.SplitN(files[len(files)-2], "_", 2)[0]), "status:\n%s", out.String())
}

// TestDown_SaysWhatItRolledBackAndRefusesAnEmptyDatabase: down names the
// migration it rolled back, and on a database with none applied says there
// is nothing to roll back (goose's "no next version found" said nothing an
// operator could act on).
func TestDown_SaysWhatItRolledBackAndRefusesAnEmptyDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	r, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Down(ctx)
	require.ErrorIs(t, err, migrate.ErrNothingToRollBack)
	require.ErrorContains(t, err, "no migration is applied: nothing to roll back")

	_, err = r.Up(ctx)
	require.NoError(t, err)
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	got, err := r.Down(ctx)
	require.NoError(t, err)
	require.Equal(t, files[len(files)-1], got, "down names the migration it rolled back")
}

// TestDown_AnOlderBinaryRefusesANewerMigrationAndTouchesNothing: down with
// an older image (which has no down section for the database's newest
// migration) says which migration it lacks and what to run instead, and
// leaves the function set's record alone: nothing was rolled back.
func TestDown_AnOlderBinaryRefusesANewerMigrationAndTouchesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	newer, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer newer.Close()
	_, err = newer.Up(ctx)
	require.NoError(t, err)
	top, err := newer.Version(ctx)
	require.NoError(t, err)
	before, err := newer.FunctionSet(ctx)
	require.NoError(t, err)

	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	older := fstest.MapFS{}
	for _, f := range files[:len(files)-1] {
		b, err := fs.ReadFile(migrations.FS, f)
		require.NoError(t, err)
		older[f] = &fstest.MapFile{Data: b}
	}
	r, err := migrate.OpenFS(url, older, nil)
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Down(ctx)
	require.ErrorIs(t, err, migrate.ErrMigrationUnknown)
	require.ErrorContains(t, err, fmt.Sprintf("the database's newest migration, %05d, is not in this binary", top))
	v, err := r.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, top, v, "nothing rolled back")
	after, err := r.FunctionSet(ctx)
	require.NoError(t, err)
	require.Equal(t, before.Version, after.Version, "the function set's record is left alone")
}
