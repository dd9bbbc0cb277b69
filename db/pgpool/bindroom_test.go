package pgpool_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/pgpool"
	"github.com/converge-run/converge/db/pgtest"
)

// TestConfig_AStatementsMessageGrowsTheWriteBufferOnce: pgx cuts its
// connection's write buffer back to 1 KB after every flush, and a larger
// statement of several arrays (as the outbox's and a compose's are) grew it
// as each argument was copied into its Bind — an allocation and a copy of
// all before it per growth. On a connection of a pool built by Config, a
// 128 KB statement of eight arrays costs the allocations of a small one
// plus its argument buffer's and the write buffer's one growth each. The
// same statement on a connection without the room made is the control.
func TestConfig_AStatementsMessageGrowsTheWriteBufferOnce(t *testing.T) { //nolint:paralleltest // AllocsPerRun counts the whole process's allocations
	ctx := context.Background()
	docs := func(n int) pgpool.Array[json.RawMessage] {
		a := make(pgpool.Array[json.RawMessage], n)
		for i := range a {
			a[i] = json.RawMessage(`{"cidr":"10.0.0.0/16","note":"` + strings.Repeat("x", 100) + `"}`)
		}
		return a
	}
	small, big := docs(1), docs(128) // 1 KB and 128 KB of arguments
	count := func(pool *pgxpool.Pool, arg pgpool.Array[json.RawMessage]) float64 {
		c, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer c.Release()
		var n int
		run := func() {
			if err := c.QueryRow(ctx, `SELECT cardinality($1::jsonb[]) + cardinality($2::jsonb[]) + cardinality($3::jsonb[]) + cardinality($4::jsonb[])
			                            + cardinality($5::jsonb[]) + cardinality($6::jsonb[]) + cardinality($7::jsonb[]) + cardinality($8::jsonb[])`,
				pgpool.Reserve(arg, arg, arg, arg, arg, arg, arg, arg)...).Scan(&n); err != nil {
				t.Fatal(err)
			}
		}
		run() // the statement's description cached
		allocs := testing.AllocsPerRun(20, run)
		require.Equal(t, 8*len(arg), n)
		return allocs
	}
	pool := func(room bool) *pgxpool.Pool {
		cfg, err := pgpool.Config(pgtest.URL(t), 2)
		require.NoError(t, err)
		if !room {
			cfg.ConnConfig.Tracer = nil
		}
		p, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(p.Close)
		return p
	}
	with, without := pool(true), pool(false)
	grownOnce := count(with, big) - count(with, small)
	doubled := count(without, big) - count(without, small)
	t.Logf("a 128 KB statement's extra allocations: %.0f with the room made, %.0f without", grownOnce, doubled)
	require.GreaterOrEqual(t, doubled, 4.0, "the control: a growth for every doubling of the Bind")
	require.LessOrEqual(t, grownOnce, 2.0, "the argument buffer's growth and the write buffer's, once each")
}
