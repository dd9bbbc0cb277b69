package live_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// listen opens a connection LISTENing on the announcement channels and
// returns a function collecting every payload that arrived within d.
func listen(t *testing.T, url string) (*pgx.Conn, func(d time.Duration) []string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	_, err = conn.Exec(ctx, `LISTEN resource_changed; LISTEN operation_changed`)
	require.NoError(t, err)
	return conn, func(d time.Duration) []string {
		var out []string
		for {
			wctx, cancel := context.WithTimeout(ctx, d)
			n, err := conn.WaitForNotification(wctx)
			cancel()
			if err != nil {
				return out
			}
			out = append(out, n.Channel+" "+n.Payload)
		}
	}
}

// TestAnnounce_OnePayloadPerStatementChunkedAndCapped: each statement on
// resources announces its ids once (per kind, in chunks under the payload
// limit, with each row's previous phase), deletes carry the row's identity,
// and a statement over the cap sends one "many" marker per kind.
func TestAnnounce_OnePayloadPerStatementChunkedAndCapped(t *testing.T) {
	t.Parallel()
	url := pgtest.URL(t)
	db := pgtest.PoolFor(t, url)
	ctx := context.Background()
	_, next := listen(t, url)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	exec(`INSERT INTO kind_manifest (kind, version, manifest) VALUES
		('leaf', 'v1', '{"kind":"leaf","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}'),
		('twig', 'v1', '{"kind":"twig","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}')`)

	exec(`INSERT INTO resources (id, kind, version, name, shard_id)
		SELECT id, 'leaf', 'v1', 'r' || i, shard_of(id) FROM (SELECT gen_random_uuid() id, i FROM generate_series(1, 450) i) x`)
	got := next(200 * time.Millisecond)
	require.Len(t, got, 3, "450 ids in chunks of 200")
	ids := 0
	for _, p := range got {
		require.True(t, strings.HasPrefix(p, "resource_changed u|leaf|"), p)
		require.Less(t, len(p), 8000)
		for _, item := range strings.Split(strings.SplitN(p, "|", 3)[2], ",") {
			require.Len(t, item, 37)
			require.Equal(t, byte('+'), item[36], "inserted")
			ids++
		}
	}
	require.Equal(t, 450, ids)

	exec(`UPDATE resources SET synced_gen = generation WHERE name IN ('r1', 'r2')`)
	got = next(200 * time.Millisecond)
	require.Len(t, got, 1)
	require.Regexp(t, `^resource_changed u\|leaf\|[0-9a-f-]{36}C,[0-9a-f-]{36}C$`, got[0], "the phase before: Reconciling")

	exec(`UPDATE resources SET spec = '{}' WHERE false`)
	require.Empty(t, next(100*time.Millisecond), "a statement that changed nothing announces nothing")

	exec(`DELETE FROM resources WHERE name = 'r1'`)
	got = next(200 * time.Millisecond)
	require.Len(t, got, 1)
	require.Regexp(t, `^resource_changed d\|leaf\|[0-9a-f-]{36}R::r1$`, got[0], "id, last phase, owner (none), name")

	exec(`INSERT INTO resources (id, kind, version, name, shard_id)
		SELECT id, 'twig', 'v1', 't' || i, shard_of(id) FROM (SELECT gen_random_uuid() id, i FROM generate_series(1, 5000) i) x`)
	require.Equal(t, []string{"resource_changed m|twig"}, next(200*time.Millisecond), "over the cap: one marker")

	exec(`BEGIN; UPDATE resources SET health_ok = false WHERE name = 'r2'; ROLLBACK`)
	require.Empty(t, next(100*time.Millisecond), "a rolled back statement announces nothing")
}
