package migrate_test

import (
	"context"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/migrations"
	"github.com/converge-run/converge/db/pgtest"
)

// concurrentBuild matches an index build CONCURRENTLY in a migration's Up
// section: the index's name and the rest of the statement.
var concurrentBuild = regexp.MustCompile(`(?is)CREATE\s+INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\s+(ON\s[^;]*);`)

// upTo migrates url with the embedded migrations numbered below version.
func upTo(t *testing.T, url string, version int) {
	t.Helper()
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	sub := fstest.MapFS{}
	for _, f := range files {
		v, err := strconv.Atoi(strings.SplitN(f, "_", 2)[0])
		require.NoError(t, err)
		if v < version {
			b, err := fs.ReadFile(migrations.FS, f)
			require.NoError(t, err)
			sub[f] = &fstest.MapFile{Data: b}
		}
	}
	r, err := migrate.OpenFS(url, sub, nil)
	require.NoError(t, err)
	defer r.Close()
	_, err = r.Up(context.Background())
	require.NoError(t, err)
}

// TestUp_RebuildsAnIndexAFailedBuildLeftInvalid: a build CONCURRENTLY that
// fails (cancelled, a deadlock, the pod stopped) leaves an invalid index
// behind, which Postgres keeps up to date on every write but never reads,
// and the migration is not recorded. The next run must build it again: a
// migration that skipped an existing index (IF NOT EXISTS) recorded itself
// over the invalid one, and its reads scanned the table for good.
func TestUp_RebuildsAnIndexAFailedBuildLeftInvalid(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, f := range files {
		b, err := fs.ReadFile(migrations.FS, f)
		require.NoError(t, err)
		up, _, _ := strings.Cut(string(b), "-- +goose Down")
		builds := concurrentBuild.FindAllStringSubmatch(up, -1)
		if len(builds) == 0 {
			continue
		}
		version, err := strconv.Atoi(strings.SplitN(f, "_", 2)[0])
		require.NoError(t, err)
		t.Run(f, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			url := pgtest.EmptyURL(t)
			upTo(t, url, version)
			for _, m := range builds {
				failBuild(t, url, m[1], m[2])
			}
			r, err := migrate.Open(url, nil)
			require.NoError(t, err)
			defer r.Close()
			_, err = r.Up(ctx)
			require.NoError(t, err)
			rows, err := connect(t, url).Query(ctx, `SELECT indexrelid::regclass::text FROM pg_index
			    WHERE NOT indisvalid AND indrelid::regclass::text NOT LIKE 'pg_%'`)
			require.NoError(t, err)
			invalid, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Empty(t, invalid, "no index is left invalid after migrating")
		})
	}
}

// failBuild leaves name as an invalid index: its build CONCURRENTLY, given
// a short lock timeout, gives up waiting for an open snapshot.
func failBuild(t *testing.T, url, name, rest string) {
	t.Helper()
	ctx := context.Background()
	tx, err := connect(t, url).BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
	builder := connect(t, url)
	_, err = builder.Exec(ctx, `SET lock_timeout = '50ms'`)
	require.NoError(t, err)
	_, err = builder.Exec(ctx, fmt.Sprintf("CREATE INDEX CONCURRENTLY %s %s", name, rest))
	require.ErrorContains(t, err, "lock timeout")
	var valid bool
	require.NoError(t, builder.QueryRow(ctx, `SELECT indisvalid FROM pg_index WHERE indexrelid = $1::regclass`, name).Scan(&valid))
	require.False(t, valid, "the failed build left %s invalid", name)
}

// TestUp_NamesTheIndexesLeftInvalid: an index a failed build left invalid
// after its migration was recorded (00021 recorded itself over such a
// leftover before it dropped leftovers first) is never built again by a
// migration; Up names it, so boot can say so.
func TestUp_NamesTheIndexesLeftInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	_, err := connect(t, url).Exec(ctx, `DROP INDEX idx_resources_config_ref`)
	require.NoError(t, err)
	failBuild(t, url, "idx_resources_config_ref", "ON resources (kind, provider_config_ref) WHERE provider_config_ref IS NOT NULL")

	r, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer r.Close()
	rep, err := r.Up(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Migrations)
	require.Equal(t, []string{"idx_resources_config_ref"}, rep.InvalidIndexes)
}
