package pgpool_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
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
	nullable = nil
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::text[]`, pgpool.Array[*string]{nil, &word}).Scan(&nullable))
	require.Len(t, nullable, 2)
	require.Nil(t, nullable[0], "a nil *string element of an Array is NULL")
	require.Equal(t, word, *nullable[1])

	var shards []int32
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::int[]`, pgpool.Array[int32]{0, 7, -3, 1 << 30}).Scan(&shards))
	require.Equal(t, []int32{0, 7, -3, 1 << 30}, shards)
	yes, no := true, false
	var flags []*bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::bool[] || $2::bool[]`, pgpool.Array[bool]{true, false}, pgpool.Array[*bool]{&yes, nil, &no}).Scan(&flags))
	require.Len(t, flags, 5)
	for i, want := range []*bool{&yes, &no, &yes, nil, &no} {
		require.Equal(t, want, flags[i], "flag %d", i)
	}
	var hasNull bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_position($1::bool[], NULL) IS NOT NULL`, pgpool.Array[*bool]{&yes, nil}).Scan(&hasNull))
	require.True(t, hasNull, "the array knows it holds a NULL")

	// An Array for an array type it has no one-pass plan for still encodes,
	// element by element.
	var vc []string
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::varchar[]::text[]`, pgpool.Array[string]{"a", "bé"}).Scan(&vc))
	require.Equal(t, []string{"a", "bé"}, vc)
	for typ, empty := range map[string]any{"uuid[]": pgpool.Array[uuid.UUID]{}, "bigint[]": pgpool.Array[int64]{}, "int[]": pgpool.Array[int32]{},
		"bool[]": pgpool.Array[bool]{}, "jsonb[]": pgpool.Array[json.RawMessage]{}, "text[]": pgpool.Array[*string]{}} {
		var card *int
		var eq bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT cardinality($1::`+typ+`), $1::`+typ+` = '{}'`, empty).Scan(&card, &eq), "%T", empty)
		require.NotNil(t, card, "%T", empty)
		require.Zero(t, *card, "%T: an empty Array is an empty array", empty)
		require.True(t, eq, "%T: equal to '{}'", empty)
	}
}

// TestArrayEncodesAsPgxDoes: an Array's one-pass encoding is byte for byte
// what pgx's own array codec makes of the same elements (the element plans
// RegisterArrays and RegisterUUID leave to it), NULL elements included.
func TestArrayEncodesAsPgxDoes(t *testing.T) {
	t.Parallel()
	ours := pgtype.NewMap()
	pgpool.RegisterUUID(ours)
	pgpool.RegisterArrays(ours)
	theirs := pgtype.NewMap()
	word, yes := "région ✓", true
	for _, c := range []struct {
		oid          uint32
		array, plain any
	}{
		{pgtype.UUIDArrayOID, pgpool.Array[uuid.UUID]{uuid.New(), uuid.New()}, nil},
		{pgtype.TextArrayOID, pgpool.Array[string]{"vpc", "", word}, []string{"vpc", "", word}},
		{pgtype.TextArrayOID, pgpool.Array[*string]{&word, nil}, []*string{&word, nil}},
		{pgtype.Int8ArrayOID, pgpool.Array[int64]{0, -1, 1 << 62}, []int64{0, -1, 1 << 62}},
		{pgtype.Int4ArrayOID, pgpool.Array[int32]{0, -1, 1 << 30}, []int32{0, -1, 1 << 30}},
		{pgtype.BoolArrayOID, pgpool.Array[bool]{true, false}, []bool{true, false}},
		{pgtype.BoolArrayOID, pgpool.Array[*bool]{nil, &yes}, []*bool{nil, &yes}},
		{pgtype.JSONBArrayOID, pgpool.Array[json.RawMessage]{json.RawMessage(`{"a":1}`), nil}, nil},
	} {
		plain := c.plain
		switch a := c.array.(type) {
		case pgpool.Array[uuid.UUID]:
			plain = []pgtype.UUID{{Bytes: a[0], Valid: true}, {Bytes: a[1], Valid: true}}
		case pgpool.Array[json.RawMessage]:
			plain = []*map[string]int{{"a": 1}, nil}
		}
		got, err := ours.Encode(c.oid, pgtype.BinaryFormatCode, c.array, []byte("prefix"))
		require.NoError(t, err, "%T", c.array)
		want, err := theirs.Encode(c.oid, pgtype.BinaryFormatCode, plain, []byte("prefix"))
		require.NoError(t, err, "%T", plain)
		require.Equal(t, want, got, "%T appended as pgx encodes %T", c.array, plain)
	}
}

// TestReserve_GrowsTheBufferOnceForTheStatement: a statement's arguments
// encoded one after another into one buffer, as pgx does, grow it once when
// they went through Reserve, and once per Array when they did not; the
// bytes are the same either way, and Postgres reads them (a NULL Array and a
// scalar among them, the first argument not an Array).
func TestReserve_GrowsTheBufferOnceForTheStatement(t *testing.T) { //nolint:paralleltest // AllocsPerRun counts the whole process's allocations
	m := pgtype.NewMap()
	pgpool.RegisterUUID(m)
	pgpool.RegisterArrays(m)
	const n = 256
	ids, names, docs, flags := make(pgpool.Array[uuid.UUID], n), make(pgpool.Array[string], n), make(pgpool.Array[json.RawMessage], n), make(pgpool.Array[*bool], n)
	yes := true
	for i := range n {
		ids[i], names[i] = uuid.New(), "leaf-"+uuid.NewString()
		docs[i] = json.RawMessage(`{"vpc_id":"` + names[i] + `"}`)
		if i%3 == 0 {
			flags[i] = &yes
		}
	}
	oids := []uint32{pgtype.Int8OID, pgtype.UUIDArrayOID, pgtype.TextArrayOID, pgtype.JSONBArrayOID, pgtype.BoolArrayOID, pgtype.Int8ArrayOID}
	plain := []any{int64(7), ids, names, docs, flags, pgpool.Array[int64](nil)}
	encode := func(args []any) ([]byte, error) {
		buf := make([]byte, 0, 256) // what pgx starts each statement with
		for i, a := range args {
			var err error
			if buf, err = m.Encode(oids[i], pgtype.BinaryFormatCode, a, buf); err != nil {
				return nil, err
			}
		}
		return buf, nil
	}
	want, err := encode(plain)
	require.NoError(t, err)
	reservedArgs := pgpool.Reserve(append([]any(nil), plain...)...)
	got, err := encode(reservedArgs)
	require.NoError(t, err)
	require.Equal(t, want, got, "the same bytes")
	count := func(args []any) float64 {
		return testing.AllocsPerRun(20, func() {
			if _, err := encode(args); err != nil {
				t.Fatal(err)
			}
		})
	}
	alone, together := count(plain), count(reservedArgs)
	t.Logf("%.0f allocations without Reserve, %.0f with", alone, together)
	require.GreaterOrEqual(t, alone, 4.0, "one growth per Array at least")
	require.LessOrEqual(t, together, 2.0, "the statement's first buffer and its one growth")

	pool := pgtest.Pool(t)
	var gotIDs []uuid.UUID
	var gotNames []string
	var nulls, k int
	var none *int
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT $1::bigint, $2::uuid[], $3::text[], cardinality($4::jsonb[]), (SELECT count(*) FROM unnest($5::bool[]) f WHERE f IS NULL), cardinality($6::bigint[])`,
		pgpool.Reserve(int64(7), ids, names, docs, flags, pgpool.Array[int64](nil))...).Scan(&k, &gotIDs, &gotNames, &nulls, &nulls, &none))
	require.Equal(t, 7, k)
	require.Equal(t, []uuid.UUID(ids), gotIDs)
	require.Equal(t, []string(names), gotNames)
	require.Equal(t, n-(n+2)/3, nulls, "the NULL flags")
	require.Nil(t, none, "a NULL array")

	// A pool not built by Config has none of the plans: reserved arguments
	// are still encoded, element by element.
	bare, err := pgxpool.New(context.Background(), pgtest.URL(t))
	require.NoError(t, err)
	defer bare.Close()
	var shards []int32
	var words []*string
	var ok *bool
	require.NoError(t, bare.QueryRow(context.Background(), `SELECT $1::int[], $2::text[], ($3::bool[])[2]`,
		pgpool.Reserve(pgpool.Array[int32]{3, 1}, pgpool.Array[*string]{&names[0], nil}, pgpool.Array[*bool]{&yes, nil})...).Scan(&shards, &words, &ok))
	require.Equal(t, []int32{3, 1}, shards)
	require.Len(t, words, 2)
	require.Equal(t, names[0], *words[0])
	require.Nil(t, words[1], "a NULL word")
	require.Nil(t, ok, "a NULL flag")
}

// TestArrayGrowsTheBufferOnce: a statement's parameters are appended to one
// buffer that pgx starts small for every statement; an Array grows it once
// (a single allocation), however many elements it has.
func TestArrayGrowsTheBufferOnce(t *testing.T) { //nolint:paralleltest // AllocsPerRun counts the whole process's allocations
	m := pgtype.NewMap()
	pgpool.RegisterUUID(m)
	pgpool.RegisterArrays(m)
	docs := make(pgpool.Array[json.RawMessage], 256)
	for i := range docs {
		docs[i] = json.RawMessage(`{"vpc_id":"` + uuid.NewString() + `","cidr":"10.0.0.0/16"}`)
	}
	var arg any = docs // boxed once, as pgx's caller has it
	allocs := testing.AllocsPerRun(20, func() {
		if _, err := m.Encode(pgtype.JSONBArrayOID, pgtype.BinaryFormatCode, arg, make([]byte, 0, 256)); err != nil {
			t.Fatal(err)
		}
	})
	// Two: the 256-byte buffer the statement starts with, and its one growth.
	require.LessOrEqual(t, allocs, 2.0, "256 documents grow the buffer once")
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
