package migrate_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/functions"
	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/pgtest"
)

// variant is the embedded set at another version, with announce_cap()
// returning capValue: a visible, harmless difference between two sets.
func variant(t *testing.T, version int64, capValue string) *functions.Set {
	t.Helper()
	return editedSet(t, version, "announce_cap.sql", "SELECT 4000", "SELECT "+capValue)
}

// editedSet is the embedded set at another version, with from replaced by
// to in the function file name (which must hold from).
func editedSet(t *testing.T, version int64, name, from, to string) *functions.Set {
	t.Helper()
	s, err := functions.Embedded()
	require.NoError(t, err)
	files := make([]functions.File, len(s.Files))
	copy(files, s.Files)
	found := false
	for i, f := range files {
		if f.Name == name {
			require.Contains(t, f.SQL, from)
			files[i].SQL = strings.Replace(f.SQL, from, to, 1)
			found = true
		}
	}
	require.True(t, found, "no function file %s", name)
	return &functions.Set{Version: version, Checksum: functions.Sum(files), Files: files}
}

func upWith(t *testing.T, url string, set *functions.Set) (migrate.Report, error) {
	t.Helper()
	r, err := migrate.OpenWith(url, migrate.Options{Functions: set})
	require.NoError(t, err)
	defer r.Close()
	return r.Up(context.Background())
}

func announceCap(t *testing.T, url string) int {
	t.Helper()
	var n int
	require.NoError(t, connect(t, url).QueryRow(context.Background(), `SELECT announce_cap()`).Scan(&n))
	return n
}

func TestFunctionSet_OnlyMovesForward(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	embedded, err := functions.Embedded()
	require.NoError(t, err)
	older := &embedded
	newer := variant(t, embedded.Version+1, "4001")

	rep, err := upWith(t, url, older)
	require.NoError(t, err)
	require.Equal(t, migrate.FunctionsApplied, rep.Functions.Action, "a fresh database takes the set")
	require.Equal(t, 4000, announceCap(t, url))

	rep, err = upWith(t, url, newer)
	require.NoError(t, err)
	require.Equal(t, migrate.FunctionsApplied, rep.Functions.Action, "a newer set applies")
	require.Zero(t, rep.Migrations, "the schema was already migrated")
	require.Equal(t, 4001, announceCap(t, url))

	rep, err = upWith(t, url, older)
	require.NoError(t, err)
	require.Equal(t, migrate.FunctionsNewerPresent, rep.Functions.Action, "an older binary leaves a newer set alone")
	require.Equal(t, newer.Version, rep.Functions.Recorded)
	require.Equal(t, embedded.Version, rep.Functions.Embedded)
	require.Equal(t, 4001, announceCap(t, url), "the newer body survives an older binary's boot")

	rep, err = upWith(t, url, newer)
	require.NoError(t, err)
	require.Equal(t, migrate.FunctionsUnchanged, rep.Functions.Action, "the same set again is a no-op")

	r, err := migrate.OpenWith(url, migrate.Options{Functions: newer})
	require.NoError(t, err)
	defer r.Close()
	rec, err := r.FunctionSet(context.Background())
	require.NoError(t, err)
	require.Equal(t, newer.Version, rec.Version)
	require.Equal(t, newer.Checksum, rec.Checksum)
}

func TestFunctionSet_EqualVersionIsANoOp(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	_, err := upWith(t, url, nil)
	require.NoError(t, err)
	// Change a body behind the runner's back: an equal set must not touch
	// pg_proc at all (no re-apply, no plan invalidation on every boot).
	const handEdited = "announce_cap"
	_, err = connect(t, url).Exec(context.Background(),
		`CREATE OR REPLACE FUNCTION `+handEdited+`() RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 7 $$`)
	require.NoError(t, err)
	rep, err := upWith(t, url, nil)
	require.NoError(t, err)
	require.Equal(t, migrate.FunctionsUnchanged, rep.Functions.Action)
	require.Equal(t, 7, announceCap(t, url), "an equal set is not re-applied")
}

func TestFunctionSet_EqualVersionOtherChecksumRefuses(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	embedded, err := functions.Embedded()
	require.NoError(t, err)
	_, err = upWith(t, url, nil)
	require.NoError(t, err)

	_, err = upWith(t, url, variant(t, embedded.Version, "4002"))
	require.ErrorIs(t, err, migrate.ErrFunctionSetConflict, "two builds disagree about one version: refuse")
	require.Equal(t, 4000, announceCap(t, url), "the refused set applied nothing")
}

func TestFunctionSet_ConcurrentOlderAndNewerBootsEndOnNewer(t *testing.T) {
	t.Parallel()
	url := pgtest.EmptyURL(t)
	embedded, err := functions.Embedded()
	require.NoError(t, err)
	newer := variant(t, embedded.Version+1, "4001")
	_, err = upWith(t, url, &embedded)
	require.NoError(t, err)

	// A rolling update: old and new pods boot at once, in any order.
	const pods = 6
	reports := make([]migrate.Report, pods)
	errs := make([]error, pods)
	var wg sync.WaitGroup
	for i := range pods {
		set := &embedded
		if i%2 == 1 {
			set = newer
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := migrate.OpenWith(url, migrate.Options{Functions: set})
			if err != nil {
				errs[i] = err
				return
			}
			defer r.Close()
			reports[i], errs[i] = r.Up(context.Background())
		}()
	}
	wg.Wait()
	applied := 0
	for i := range pods {
		require.NoError(t, errs[i], "pod %d", i)
		if reports[i].Functions.Action == migrate.FunctionsApplied {
			applied++
			require.Equal(t, newer.Version, reports[i].Functions.Recorded, "only the newer set can apply")
		}
	}
	require.Equal(t, 1, applied, "the newer set applied exactly once")
	require.Equal(t, 4001, announceCap(t, url))
	var rows int
	require.NoError(t, connect(t, url).QueryRow(context.Background(),
		`SELECT count(*) FROM converge_function_set`).Scan(&rows))
	require.Equal(t, 2, rows, "one record per version applied")
}

// TestFunctionSet_BodiesCheckAgainstSchema: the runner applies the set with
// check_function_bodies off (before the tables exist); here every file is
// re-created with the check on against the migrated schema, so a syntax error
// or a SQL body naming a missing table or column fails a test, not a call.
func TestFunctionSet_BodiesCheckAgainstSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	set, err := functions.Embedded()
	require.NoError(t, err)
	tx, err := connect(t, url).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL check_function_bodies = on`)
	require.NoError(t, err)
	for _, f := range set.Files {
		_, err := tx.Exec(ctx, f.SQL)
		require.NoError(t, err, f.Name)
	}
}

// TestDown_TheOlderBinaryPutsItsFunctionsBackOverTheSchemaItRolledBackTo: a
// release is rolled back — its migration down (with its own image), then
// the older binary. The newer set's bodies read what the rolled-back
// migration had added; the older binary must put its own bodies back, not
// leave the newer set in place as "newer present" over a schema it no
// longer matches.
func TestDown_TheOlderBinaryPutsItsFunctionsBackOverTheSchemaItRolledBackTo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	oldFS := fstest.MapFS{"00001_t.sql": lockFS("")["00001_t.sql"]}
	newFS := lockFS("-- +goose Up\nALTER TABLE t ADD COLUMN c int NOT NULL DEFAULT 7;\n\n-- +goose Down\nALTER TABLE t DROP COLUMN c;\n")
	run := func(fsys fstest.MapFS, set *functions.Set, f func(*migrate.Runner) error) {
		r, err := migrate.OpenWith(url, migrate.Options{Migrations: fsys, Functions: set})
		require.NoError(t, err)
		defer r.Close()
		require.NoError(t, f(r))
	}
	up := func(r *migrate.Runner) error { _, err := r.Up(ctx); return err }
	oldSet, newSet := fnSet(1, "SELECT count(*) FROM t"), fnSet(2, "SELECT coalesce(sum(c), 0) FROM t")
	run(oldFS, oldSet, up)
	run(newFS, newSet, up)
	conn := connect(t, url)
	_, err := conn.Exec(ctx, `INSERT INTO t VALUES (1)`)
	require.NoError(t, err)
	var n int64
	require.NoError(t, conn.QueryRow(ctx, `SELECT f()`).Scan(&n))
	require.Equal(t, int64(7), n)

	run(newFS, newSet, func(r *migrate.Runner) error { _, err := r.Down(ctx); return err })
	run(oldFS, oldSet, up)
	require.NoError(t, conn.QueryRow(ctx, `SELECT f()`).Scan(&n), "the older binary's function works over its schema")
	require.Equal(t, int64(1), n, "the older body")
}
