package migrate_test

import (
	"context"
	"io/fs"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/functions"
	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/migrations"
	"github.com/converge-run/converge/db/pgtest"
)

// migrationsThrough is the embedded migrations up to and including last.
func migrationsThrough(t *testing.T, last string) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	entries, err := fs.ReadDir(migrations.FS, ".")
	require.NoError(t, err)
	for _, e := range entries {
		if e.Name() > last {
			continue
		}
		data, err := fs.ReadFile(migrations.FS, e.Name())
		require.NoError(t, err)
		out[e.Name()] = &fstest.MapFile{Data: data}
	}
	return out
}

// TestUp_AnUpgradedDatabaseKeepsOnlyTheOneArgumentReap: function set 86 gave
// reap_unlocked_cluster_members its own-lock argument; CREATE OR REPLACE
// cannot change a signature, so a database that ran an earlier set kept the
// zero-argument function (the body that removed its caller too) beside the
// new one. A database migrated by such a release, through 00026, then
// upgraded ends with the one-argument function alone.
func TestUp_AnUpgradedDatabaseKeepsOnlyTheOneArgumentReap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	embedded, err := functions.Embedded()
	require.NoError(t, err)
	// The earlier release: its reap_unlocked_cluster_members takes no
	// argument. Only the signature matters here: the body, never called,
	// still names the argument (plpgsql resolves it only when it runs).
	older := editedSet(t, embedded.Version-1, "reap_unlocked_cluster_members.sql",
		"reap_unlocked_cluster_members(p_self_key int)", "reap_unlocked_cluster_members()")
	r, err := migrate.OpenWith(url, migrate.Options{Migrations: migrationsThrough(t, "00026_~"), Functions: older})
	require.NoError(t, err)
	_, err = r.Up(ctx)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	require.Equal(t, []string{""}, reapSignatures(t, url), "the earlier release's database")

	r, err = migrate.Open(url, nil)
	require.NoError(t, err)
	defer r.Close()
	rep, err := r.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, migrate.FunctionsApplied, rep.Functions.Action)
	require.Equal(t, []string{"p_self_key integer"}, reapSignatures(t, url), "only the one-argument function is left")

	// Down past 00027 and up again: nothing to restore, nothing left over.
	_, err = r.Down(ctx)
	require.NoError(t, err)
	_, err = r.Up(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"p_self_key integer"}, reapSignatures(t, url))
}

// reapSignatures lists the argument lists of every
// reap_unlocked_cluster_members the database holds.
func reapSignatures(t *testing.T, url string) []string {
	t.Helper()
	var out []string
	require.NoError(t, connect(t, url).QueryRow(context.Background(),
		`SELECT array_agg(pg_get_function_arguments(oid) ORDER BY 1) FROM pg_proc
		  WHERE proname = 'reap_unlocked_cluster_members' AND pronamespace = 'public'::regnamespace`).Scan(&out))
	return out
}
