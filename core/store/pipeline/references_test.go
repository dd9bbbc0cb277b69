package pipeline

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// The owner and edge references to resources are checked and cascaded per
// statement by triggers (migration 00028), not by foreign keys. These tests
// hold them to what the foreign keys did: a reference to a missing resource
// fails with the foreign key's own error and writes nothing, a delete takes
// its owned resources and its edges with it, and a reference racing a
// delete either waits for it and fails, or makes the delete wait and is
// then removed by it.

// pgError asserts that err is a Postgres error with SQLSTATE code and
// returns the constraint it names ("" for none).
func pgError(t *testing.T, err error, code string) (constraint string) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "a Postgres error, got %v", err)
	require.Equal(t, code, pgErr.Code, pgErr.Message)
	return pgErr.ConstraintName
}

// refusal asserts that err is a foreign-key violation of constraint.
func refusal(t *testing.T, err error, constraint string) {
	t.Helper()
	require.Equal(t, constraint, pgError(t, err, "23503"), "the violated constraint")
}

func TestReferences_AMissingResourceIsRefusedAndNothingIsWritten(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	a := f.res("leaf", "a")
	b := f.res("leaf", "b")
	missing := uuid.New()

	_, err := f.pool.Exec(f.ctx, `INSERT INTO resources (kind, version, name, owner_id, shard_id)
	    VALUES ('leaf', 'v1', 'c', $1, 1), ('leaf', 'v1', 'd', $2, 2)`, a, missing)
	refusal(t, err, "resources_owner_id_fkey")
	require.Equal(t, 2, scalar[int](f, `SELECT count(*) FROM resources`),
		"the statement wrote neither row, the one with a valid owner included")

	_, err = f.pool.Exec(f.ctx, `INSERT INTO resource_deps (dependent_id, dependency_id) VALUES ($1, $2), ($2, $3)`, a, b, missing)
	refusal(t, err, "resource_deps_dependency_id_fkey")
	_, err = f.pool.Exec(f.ctx, `INSERT INTO resource_deps (dependent_id, dependency_id) VALUES ($1, $2)`, missing, b)
	refusal(t, err, "resource_deps_dependent_id_fkey")
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM resource_deps`), "no edge was written")

	f.edge(a, b)
	_, err = f.pool.Exec(f.ctx, `UPDATE resources SET owner_id = $2 WHERE id = $1`, b, missing)
	refusal(t, err, "resources_owner_id_fkey")
	f.set(b, `owner_id = $2`, a) // re-adopted by one that exists
	require.Equal(t, a, scalar[uuid.UUID](f, `SELECT owner_id FROM resources WHERE id = $1`, b))

	_, err = f.pool.Exec(f.ctx, `UPDATE resources SET id = $2 WHERE id = $1`, a, uuid.New())
	pgError(t, err, "23514") // an id never changes
}

func TestReferences_ADeleteTakesItsSubtreeAndEdgesWithIt(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	root := f.res("leaf", "root")
	mid := f.res("leaf", "mid", owner(root))
	leaf := f.res("leaf", "leaf", owner(mid))
	outside := f.res("leaf", "outside")
	f.edge(leaf, outside) // an edge out of the subtree
	f.edge(outside, mid)  // and one into it
	keep := f.res("leaf", "keep")
	f.edge(keep, outside)

	f.exec(`DELETE FROM resources WHERE id = $1`, root)
	require.Equal(t, []string{"keep", "outside"},
		scalar[[]string](f, `SELECT array_agg(name ORDER BY name) FROM resources`), "the owned subtree went, two levels down")
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM resource_deps`), "every edge with a deleted end went")
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM resource_deps WHERE dependent_id = $1 AND dependency_id = $2`, keep, outside))

	f.exec(`DELETE FROM resources WHERE false`) // a delete of nothing fires the statement triggers too, and ends
	f.exec(`TRUNCATE resources CASCADE`)
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM resource_deps`), "a TRUNCATE of resources empties the edges")
}

// A delete under REPEATABLE READ would cascade with the transaction's own
// snapshot and miss a reference committed since: it is refused.
func TestReferences_ADeleteUnderRepeatableReadIsRefused(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	a := f.res("leaf", "a")
	tx, err := f.pool.BeginTx(f.ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(f.ctx) }()
	_, err = tx.Exec(f.ctx, `DELETE FROM resources WHERE id = $1`, a)
	pgError(t, err, "0A000")
}

// A reference and a delete of what it references, in two transactions: the
// one that locks the resource first decides, as with a foreign key.
func TestReferences_AReferenceRacingADelete(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reference  string // $1 the referenced resource, $2 another
		constraint string
	}{
		"AChild":      {`INSERT INTO resources (kind, version, name, owner_id, shard_id) VALUES ('leaf', 'v1', 'child-of-' || $2::text, $1, 3)`, "resources_owner_id_fkey"},
		"AnEdgeTo":    {`INSERT INTO resource_deps (dependent_id, dependency_id) VALUES ($2, $1)`, "resource_deps_dependency_id_fkey"},
		"AnEdgeFrom":  {`INSERT INTO resource_deps (dependent_id, dependency_id) VALUES ($1, $2)`, "resource_deps_dependent_id_fkey"},
		"AReAdoption": {`UPDATE resources SET owner_id = $1 WHERE id = $2`, "resources_owner_id_fkey"},
	}
	// setup is a fresh database holding the target and another resource.
	setup := func(t *testing.T) (f *fx, target, other uuid.UUID) {
		t.Helper()
		f = newFx(t)
		f.kind("leaf", reactWorker)
		return f, f.res("leaf", "target"), f.res("leaf", "other")
	}
	for name, tc := range cases {
		t.Run(name+"/ReferencedFirst", func(t *testing.T) {
			t.Parallel()
			f, target, other := setup(t)
			ref := begin(t, f)
			_, err := ref.Exec(f.ctx, tc.reference, target, other)
			require.NoError(t, err)
			del := begin(t, f)
			deleted := make(chan error, 1)
			go func() {
				_, err := del.Exec(f.ctx, `DELETE FROM resources WHERE id = $1`, target)
				deleted <- err
			}()
			waitBlocked(t, f, del)
			require.NoError(t, ref.Commit(f.ctx))
			require.NoError(t, <-deleted)
			require.NoError(t, del.Commit(f.ctx))
			require.Zero(t, scalar[int](f, `SELECT count(*) FROM resources WHERE owner_id = $1`, target), "no child outlives the delete")
			require.Zero(t, scalar[int](f, `SELECT count(*) FROM resource_deps WHERE $1 IN (dependent_id, dependency_id)`, target),
				"no edge outlives the delete")
		})
		t.Run(name+"/DeletedFirst", func(t *testing.T) {
			t.Parallel()
			f, target, other := setup(t)
			del := begin(t, f)
			_, err := del.Exec(f.ctx, `DELETE FROM resources WHERE id = $1`, target)
			require.NoError(t, err)
			ref := begin(t, f)
			referenced := make(chan error, 1)
			go func() {
				_, err := ref.Exec(f.ctx, tc.reference, target, other)
				referenced <- err
			}()
			waitBlocked(t, f, ref)
			require.NoError(t, del.Commit(f.ctx))
			refusal(t, <-referenced, tc.constraint)
		})
	}
}

// begin starts a transaction on a connection of its own, rolled back at the
// test's end unless committed.
func begin(t *testing.T, f *fx) pgx.Tx {
	t.Helper()
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// waitBlocked waits until tx's backend waits for a lock another holds.
func waitBlocked(t *testing.T, f *fx, tx pgx.Tx) {
	t.Helper()
	pid := tx.Conn().PgConn().PID()
	require.Eventually(t, func() bool {
		return scalar[bool](f, `SELECT cardinality(pg_blocking_pids($1)) > 0`, int32(pid))
	}, 10*time.Second, 5*time.Millisecond, "the statement waits for the other transaction's lock")
}
