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
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/migrations"
	"github.com/converge-run/converge/db/pgtest"
)

// concurrentBuild matches an index build CONCURRENTLY in a migration's Up
// section: the index's name and the rest of the statement.
var concurrentBuild = regexp.MustCompile(`(?is)CREATE\s+INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)\s+(ON\s[^;]*);`)

// migrationsBelow is the embedded migrations numbered below version.
func migrationsBelow(t *testing.T, version int) fstest.MapFS {
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
	return sub
}

// upTo migrates url with the embedded migrations numbered below version.
func upTo(t *testing.T, url string, version int) {
	t.Helper()
	r, err := migrate.OpenFS(url, migrationsBelow(t, version), nil)
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

// TestMigration00002_KeepsAResourceWrittenWhileItRuns: 00002 copies every
// resource into resource_phases, then creates the triggers that keep the
// copy in step. A resource an old pod wrote in between — committed after
// the copy's snapshot, before the triggers — had no phase row, ever: no
// list page showed it and no rollup gate waited for it.
func TestMigration00002_KeepsAResourceWrittenWhileItRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	upTo(t, url, 2)

	// An old pod's write, in flight when the migration starts (its
	// triggers, written for this schema, are not what is tested here).
	writer := connect(t, url)
	_, err := writer.Exec(ctx, `SET session_replication_role = replica`)
	require.NoError(t, err)
	tx, err := writer.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO resources (kind, version, name, shard_id) VALUES ('k', 'v1', 'in-flight', 1)`)
	require.NoError(t, err)

	r, err := migrate.OpenWith(url, migrate.Options{Migrations: migrationsBelow(t, 3), LockTimeout: time.Minute})
	require.NoError(t, err)
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := r.Up(ctx)
		done <- err
	}()
	probe := connect(t, url)
	require.Eventually(t, func() bool {
		var n int
		err := probe.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		    WHERE NOT l.granted AND c.relname = 'resources'`).Scan(&n)
		return err == nil && n > 0
	}, 30*time.Second, 10*time.Millisecond, "the migration waits for the write")
	require.NoError(t, tx.Commit(ctx))
	require.NoError(t, <-done)

	var resources, phases int
	require.NoError(t, probe.QueryRow(ctx,
		`SELECT (SELECT count(*) FROM resources), (SELECT count(*) FROM resource_phases)`).Scan(&resources, &phases))
	require.Equal(t, 1, resources)
	require.Equal(t, resources, phases, "every resource has its phase row")
}

// concurrentOnly matches the statements a NO TRANSACTION migration may hold:
// those that block no reads or writes while they run or wait.
var concurrentOnly = regexp.MustCompile(`(?is)^\s*(CREATE\s+(UNIQUE\s+)?INDEX\s+CONCURRENTLY|DROP\s+INDEX\s+CONCURRENTLY|REINDEX\s+.*\sCONCURRENTLY\s)`)

// TestMigrations_NoTransactionHoldsOnlyConcurrentStatements: the runner
// bounds lock waits (LockTimeout) only for migrations in a transaction; a
// NO TRANSACTION migration runs without a bound, which is right only for
// statements that block nobody while they wait (a CONCURRENTLY build or
// drop). An ALTER TABLE there would queue every statement on its table
// behind a long transaction, for as long as that runs.
func TestMigrations_NoTransactionHoldsOnlyConcurrentStatements(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	comment := regexp.MustCompile(`(?m)^\s*--.*$`)
	for _, f := range files {
		b, err := fs.ReadFile(migrations.FS, f)
		require.NoError(t, err)
		if !strings.Contains(string(b), "-- +goose NO TRANSACTION") {
			continue
		}
		for _, stmt := range strings.Split(comment.ReplaceAllString(string(b), ""), ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			require.Regexp(t, concurrentOnly, stmt, "%s: a NO TRANSACTION migration holds only CONCURRENTLY statements", f)
		}
	}
}
