package pgpool_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestUUIDRoundTrip: ids go to Postgres and back as binary uuids through the
// registered codec, alone, in arrays and as NULLs, and compare equal in SQL
// (a text-formatted id would also compare equal, so the byte form is checked
// through uuid_send).
func TestUUIDRoundTrip(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t) // built from pgpool.Config
	ctx := context.Background()
	a, b := uuid.New(), uuid.New()

	var got uuid.UUID
	var raw []byte
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid, uuid_send($1::uuid)`, a).Scan(&got, &raw))
	require.Equal(t, a, got)
	require.Equal(t, a[:], raw)

	var ids []uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT array_agg(x ORDER BY o) FROM unnest($1::uuid[]) WITH ORDINALITY AS t(x, o)`,
		[]uuid.UUID{a, b}).Scan(&ids))
	require.Equal(t, []uuid.UUID{a, b}, ids)

	var maybe *uuid.UUID
	require.NoError(t, pool.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&maybe))
	require.Nil(t, maybe)
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, b).Scan(&maybe))
	require.Equal(t, b, *maybe)

	var n *int
	require.NoError(t, pool.QueryRow(ctx, `SELECT cardinality($1::uuid[])`, []uuid.UUID(nil)).Scan(&n))
	require.Nil(t, n, "a nil slice is a NULL array")

	require.ErrorContains(t, pool.QueryRow(ctx, `SELECT NULL::uuid`).Scan(&got), "NULL", "NULL into a uuid.UUID")
	require.NoError(t, pool.QueryRow(ctx, `SELECT $1::uuid`, pgx.QueryExecModeSimpleProtocol, b).Scan(&got))
	require.Equal(t, b, got, "the text format still scans")

	// A binary uuid is copied into a *uuid.UUID, not formatted to text for
	// its sql.Scanner and parsed back.
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	plan := conn.Conn().TypeMap().PlanScan(pgtype.UUIDOID, pgtype.BinaryFormatCode, &got)
	require.NotContains(t, fmt.Sprintf("%T", plan), "SQLScanner", "the plan: %T", plan)
}
