package migrate_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func tableCount(t *testing.T, url string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx,
		`SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		  WHERE n.nspname = 'public' AND c.relkind IN ('r','p') AND c.relname <> 'goose_db_version'`).Scan(&n))
	return n
}

func TestMigrate_UpDownUpRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	r, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer r.Close()

	n, err := r.Up(ctx)
	require.NoError(t, err)
	require.Positive(t, n)
	top, err := r.Version(ctx)
	require.NoError(t, err)
	tables := tableCount(t, url)
	require.Greater(t, tables, 10, "schema creates its tables")

	require.NoError(t, r.DownTo(ctx, 0))
	v, err := r.Version(ctx)
	require.NoError(t, err)
	require.Zero(t, v)
	require.Zero(t, tableCount(t, url), "down removes every table")

	_, err = r.Up(ctx)
	require.NoError(t, err)
	v, err = r.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, top, v)
	require.Equal(t, tables, tableCount(t, url), "up after down rebuilds the same schema")
}

func TestMigrate_ConcurrentBootAppliesOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.EmptyURL(t)
	const pods = 5
	applied := make([]int, pods)
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
			applied[i], errs[i] = r.Up(ctx)
		}()
	}
	wg.Wait()
	total, winners := 0, 0
	for i := range pods {
		require.NoError(t, errs[i], "migrator %d", i)
		total += applied[i]
		if applied[i] > 0 {
			winners++
		}
	}
	require.Equal(t, 1, winners, "exactly one booting pod applies the migrations")

	r, err := migrate.Open(url, nil)
	require.NoError(t, err)
	defer r.Close()
	v, err := r.Version(ctx)
	require.NoError(t, err)
	require.Equal(t, int(v), total, "every migration applied exactly once")
}
