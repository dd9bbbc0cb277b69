package pgpool_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/pgpool"
	"github.com/converge-run/converge/db/pgtest"
)

// TestArrayRoundTrip: an Array's elements reach Postgres in order and intact
// (uuid bytes checked through uuid_send, multi-byte text, large and negative
// bigints), an empty Array is an empty array and a nil one NULL, and the
// pointers the plans take (*string, *int64, *uuid.UUID) are still NULL when
// nil as parameters of their own.
func TestArrayRoundTrip(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t) // built from pgpool.Config
	ctx := context.Background()
	a, b := uuid.New(), uuid.New()

	var ids []uuid.UUID
	var raw []byte
	require.NoError(t, pool.QueryRow(ctx,
		`SELECT array_agg(x ORDER BY o), string_agg(uuid_send(x), ''::bytea ORDER BY o) FROM unnest($1::uuid[]) WITH ORDINALITY AS t(x, o)`,
		pgpool.Array[uuid.UUID]{a, b}).Scan(&ids, &raw))
	require.Equal(t, []uuid.UUID{a, b}, ids)
	require.Equal(t, append(a[:], b[:]...), raw, "16 bytes each, as sent")

	var strs []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::text[]`, pgpool.Array[string]{"vpc", "", "région ✓"}).Scan(&strs))
	require.Equal(t, []string{"vpc", "", "région ✓"}, strs)

	var nums []int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::bigint[]`, pgpool.Array[int64]{0, 255, 256, -1, 1 << 62}).Scan(&nums))
	require.Equal(t, []int64{0, 255, 256, -1, 1 << 62}, nums)

	var sum int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT sum(x)::bigint FROM unnest($1::int[]) x`, pgpool.Array[int64]{2, 3}).Scan(&sum))
	require.EqualValues(t, 5, sum, "an int[] parameter takes int64 elements too")

	var docs []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(coalesce(d::text, 'NULL') ORDER BY o) FROM unnest($1::jsonb[]) WITH ORDINALITY AS t(d, o)`,
		pgpool.Array[json.RawMessage]{json.RawMessage(`{"b": 1, "a": [true, null]}`), nil, json.RawMessage(`"é"`)}).Scan(&docs))
	require.Equal(t, []string{`{"a": [true, null], "b": 1}`, "NULL", `"é"`}, docs, "documents as jsonb, a nil one NULL")
	var bad string
	require.ErrorContains(t, pool.QueryRow(ctx, `SELECT $1::jsonb[]::text`, pgpool.Array[json.RawMessage]{json.RawMessage(`{"a":`)}).Scan(&bad),
		"invalid input syntax for type json", "a malformed document is refused by Postgres, as before")
	var doc map[string]int
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::jsonb`, json.RawMessage(`{"x": 2}`)).Scan(&doc))
	require.Equal(t, map[string]int{"x": 2}, doc, "a jsonb parameter of its own still encodes, and scans")

	var n *int
	require.NoError(t, pool.QueryRow(ctx, `SELECT cardinality($1::uuid[])`, pgpool.Array[uuid.UUID](nil)).Scan(&n))
	require.Nil(t, n, "a nil Array is a NULL array")
	require.NoError(t, pool.QueryRow(ctx, `SELECT cardinality($1::text[])`, pgpool.Array[string]{}).Scan(&n))
	require.NotNil(t, n)
	require.Zero(t, *n, "an empty Array is an empty array")

	var s *string
	var i *int64
	var u *uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::text, $2::bigint, $3::uuid`, (*string)(nil), (*int64)(nil), (*uuid.UUID)(nil)).Scan(&s, &i, &u))
	require.Nil(t, s)
	require.Nil(t, i)
	require.Nil(t, u)
	word, big := "route", int64(1)<<40
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::text, $2::bigint, $3::uuid`, &word, &big, &a).Scan(&s, &i, &u))
	require.Equal(t, word, *s)
	require.Equal(t, big, *i)
	require.Equal(t, a, *u)

	var nullable []*string
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::text[]`, []*string{&word, nil}).Scan(&nullable))
	require.Len(t, nullable, 2)
	require.Equal(t, word, *nullable[0])
	require.Nil(t, nullable[1], "a nil *string element is still NULL")
}

// TestArrayEncodesWithoutAnAllocationPerElement encodes each Array and the
// plain slice it replaces with the type map a pool's connections get, and
// compares the allocations: the plain slices pay at least one per element,
// an Array a constant few per statement. Not parallel: AllocsPerRun counts
// the whole process's allocations.
func TestArrayEncodesWithoutAnAllocationPerElement(t *testing.T) { //nolint:paralleltest // see above
	m := pgtype.NewMap()
	pgpool.RegisterUUID(m)
	pgpool.RegisterArrays(m)
	const n = 256
	ids, names, gens, docs := make([]uuid.UUID, n), make([]string, n), make([]int64, n), make([]json.RawMessage, n)
	for i := range n {
		ids[i], names[i], gens[i] = uuid.New(), "leaf-"+uuid.NewString(), int64(1000+i)
		docs[i] = json.RawMessage(`{"vpc_id":"` + names[i] + `"}`)
	}
	buf := make([]byte, 0, 64<<10)
	allocs := func(oid uint32, v any) float64 {
		return testing.AllocsPerRun(20, func() {
			if _, err := m.Encode(oid, pgtype.BinaryFormatCode, v, buf[:0]); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, c := range []struct {
		name         string
		oid          uint32
		plain, array any
	}{
		{"uuid[]", pgtype.UUIDArrayOID, ids, pgpool.Array[uuid.UUID](ids)},
		{"text[]", pgtype.TextArrayOID, names, pgpool.Array[string](names)},
		{"bigint[]", pgtype.Int8ArrayOID, gens, pgpool.Array[int64](gens)},
		{"jsonb[]", pgtype.JSONBArrayOID, docs, pgpool.Array[json.RawMessage](docs)},
	} {
		plain, array := allocs(c.oid, c.plain), allocs(c.oid, c.array)
		t.Logf("%s of %d: %.0f allocations plain, %.0f as an Array", c.name, n, plain, array)
		require.GreaterOrEqual(t, plain, float64(n), "%s: the plain slice boxes every element", c.name)
		// A bound well above the 1 measured: AllocsPerRun counts every
		// goroutine's allocations, and the package's others are idle, not gone.
		require.Less(t, array, float64(n)/8, "%s: an Array allocates per statement, not per element", c.name)
	}
}
