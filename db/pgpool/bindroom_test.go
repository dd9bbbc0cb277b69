package pgpool_test

import (
	"context"
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/pgpool"
	"github.com/converge-run/converge/db/pgtest"
)

// TestConfig_AStatementsBuffersAreTheConnectionsSpares: pgx cuts its
// connection's write buffer back to 1 KB after every flush and its argument
// buffer to 256 bytes before each statement, so a larger statement of
// several arrays (as the outbox's and a compose's are) allocated both
// afresh — the write buffer once per doubling as each argument was copied
// into its Bind. On a connection of a pool built by Config, a 128 KB
// statement of eight arrays allocates no more bytes than a small one: both
// buffers are the connection's spares, kept from the statement before. The
// same statement on a connection without the room made is the control.
func TestConfig_AStatementsBuffersAreTheConnectionsSpares(t *testing.T) { //nolint:paralleltest // the memory statistics count the whole process's allocations
	ctx := context.Background()
	small, big := docs("x", 1), docs("x", 128) // 1 KB and 128 KB of arguments
	bytesPerRun := func(pool *pgxpool.Pool, arg pgpool.Array[json.RawMessage]) uint64 {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		run := func() {
			var n int
			if err := c.QueryRow(ctx, eightArrays, pgpool.Reserve(arg, arg, arg, arg, arg, arg, arg, arg)...).Scan(&n); err != nil {
				t.Fatal(err)
			}
			require.Equal(t, 8*len(arg), n)
		}
		run() // the statement's description cached, the spares grown
		const runs = 20
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for range runs {
			run()
		}
		runtime.ReadMemStats(&after)
		return (after.TotalAlloc - before.TotalAlloc) / runs
	}
	with, without := pool(t, true), pool(t, false)
	spared := int64(bytesPerRun(with, big)) - int64(bytesPerRun(with, small))
	control := int64(bytesPerRun(without, big)) - int64(bytesPerRun(without, small))
	t.Logf("a 128 KB statement's bytes allocated beyond a small one's: %d with the room made, %d without", spared, control)
	require.GreaterOrEqual(t, control, int64(128<<10), "the control: the write buffer grown for every doubling of the Bind")
	require.Less(t, spared, int64(8<<10), "both buffers are the connection's spares")
}

// TestConfig_ASpareCarriesEachStatementsOwnBytes: a connection's spares
// are lent to statement after statement, large ones and small ones between
// them (which pgx writes in the spare it kept); each statement must reach
// the server with its own arguments, never a byte of another's.
func TestConfig_ASpareCarriesEachStatementsOwnBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := pool(t, true)
	c, err := p.Acquire(ctx)
	require.NoError(t, err)
	defer c.Release()
	for i, rows := range []int{128, 1, 64, 3, 2048, 128, 0, 300, 9, 128} {
		fill := strings.Repeat(string(rune('a'+i)), 1+i)
		arg := docs(fill, rows)
		var n int
		var notes []string
		require.NoError(t, c.QueryRow(ctx, eightArrays+` + 0 * cardinality($9::text[]), (SELECT coalesce(array_agg(DISTINCT d->>'note'), '{}') FROM unnest($1::jsonb[] || $8::jsonb[]) d)`,
			pgpool.Reserve(arg, arg, arg, arg, arg, arg, arg, arg, pgpool.Array[string]{fill})...).Scan(&n, &notes),
			"statement %d (%d rows)", i, rows)
		require.Equal(t, 8*rows, n, "statement %d", i)
		if rows > 0 {
			require.Equal(t, []string{strings.Repeat(fill, 100/len(fill)+1)}, notes, "statement %d carried another statement's bytes", i)
		}
	}
}

// eightArrays counts the elements of eight jsonb[] arguments.
const eightArrays = `SELECT cardinality($1::jsonb[]) + cardinality($2::jsonb[]) + cardinality($3::jsonb[]) + cardinality($4::jsonb[])
                          + cardinality($5::jsonb[]) + cardinality($6::jsonb[]) + cardinality($7::jsonb[]) + cardinality($8::jsonb[])`

// docs is n documents of about 130 bytes whose note repeats fill.
func docs(fill string, n int) pgpool.Array[json.RawMessage] {
	a := make(pgpool.Array[json.RawMessage], n)
	note := strings.Repeat(fill, 100/len(fill)+1)
	for i := range a {
		a[i] = json.RawMessage(`{"cidr":"10.0.0.0/16","note":"` + note + `"}`)
	}
	return a
}

// pool is a pool built by Config, of two connections; room false drops the
// write buffer's room (the tracer) for a control.
func pool(t *testing.T, room bool) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgpool.Config(pgtest.URL(t), 2)
	require.NoError(t, err)
	if !room {
		cfg.ConnConfig.Tracer = nil
	}
	p, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}
