package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// A delete request marks a tree; a compose writes under a root and edges to
// dependencies. These tests hold the two against each other: nothing a
// compose writes may join a tree being torn down unmarked, or its teardown
// waits for it forever.

// tearDownFinalized runs the teardown of every pending finalizer ("fin")
// delete task, then the reaper's sweep as the backstop.
func (f *fx) tearDownFinalized() {
	f.t.Helper()
	for {
		ts, err := f.st.Claim(f.ctx, all, Batch{Kind: "fin", Version: "v1", TaskType: TaskDelete, Max: 10})
		require.NoError(f.t, err)
		if len(ts) == 0 {
			break
		}
		for _, t := range ts {
			f.finish(t.Result(nil))
		}
	}
	f.exec(`SELECT sweep_deletable(0, 255, 100)`)
}

func (f *fx) exists(id uuid.UUID) bool {
	f.t.Helper()
	return scalar[bool](f, `SELECT EXISTS (SELECT 1 FROM resources WHERE id = $1)`, id)
}

// A compose claimed before its root's delete request and applied after it
// (the mark drops only unleased tasks) writes nothing: a child written then
// would be live, queued, and keep its marked root from ever being removed.
func TestCompose_UnderARootMarkedForDeletionWritesNothing(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	root := task.Key.ResourceID
	f.compose(task, Composition{Children: []Child{{Kind: "fin", Name: "final"}}}) // keeps the root in Deleting a while
	final := f.childID("fin", "final")

	f.exec(`SELECT request_resource_deletion($1)`, root)
	require.Equal(t, "Deleting", f.phase(root))

	res, err := f.st.ApplyCompose(f.ctx, task, Composition{Children: []Child{
		{Kind: "fin", Name: "final"}, {Kind: "net", Name: "late", Spec: json.RawMessage(`{}`)}}})
	require.NoError(t, err)
	require.Equal(t, ComposeResult{RootDeleting: true}, res)
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM resources WHERE kind = 'net' AND name = 'late'`))

	f.tearDownFinalized()
	require.False(t, f.exists(final))
	require.False(t, f.exists(root), "the root goes once its tree is torn down")
}

// An edge to a resource being deleted is refused, as a refusal that passes
// by itself: the new dependent would be one the mark never saw, and the
// dependency's teardown would wait for it forever. Nothing is written.
func TestCompose_RefusesAnEdgeToAResourceBeingDeleted(t *testing.T) {
	t.Parallel()
	t.Run("outside the composition", func(t *testing.T) {
		t.Parallel()
		f, task := composeFx(t)
		ext := f.res("fin", "ext")
		f.synced(ext)
		f.exec(`SELECT request_resource_deletion($1)`, ext)
		require.Equal(t, "Deleting", f.phase(ext))

		_, err := f.st.ApplyCompose(f.ctx, task, Composition{
			Children: []Child{{Kind: "net", Name: "c"}},
			Edges:    []Edge{{Dependent: "c", Dependency: Ref{Kind: "fin", Name: "ext"}}}})
		var ce *ComposeError
		require.True(t, errors.As(err, &ce), "got %v", err)
		require.Equal(t, RuleDependencyDeleting, ce.Rule)
		require.True(t, ce.Transient())
		require.Contains(t, ce.Error(), "edge to fin/ext: it is being deleted")
		require.Zero(t, scalar[int](f, `SELECT count(*) FROM resources WHERE kind = 'net' AND name = 'c'`), "nothing written")

		f.tearDownFinalized()
		require.False(t, f.exists(ext), "its teardown is not held")
	})
	t.Run("a child of the composition", func(t *testing.T) {
		t.Parallel()
		f, task := composeFx(t)
		f.compose(task, Composition{Children: []Child{{Kind: "fin", Name: "u"}}})
		u := f.childID("fin", "u")
		f.exec(`SELECT request_resource_deletion($1)`, u) // deleted by hand, still emitted

		_, err := f.st.ApplyCompose(f.ctx, task, Composition{
			Children: []Child{{Kind: "fin", Name: "u"}, {Kind: "net", Name: "d"}},
			Edges:    []Edge{{Dependent: "d", Dependency: Ref{Child: "u"}}}})
		var ce *ComposeError
		require.True(t, errors.As(err, &ce), "got %v", err)
		require.Equal(t, RuleDependencyDeleting, ce.Rule)
		require.Equal(t, "d", ce.Child)
		require.Zero(t, scalar[int](f, `SELECT count(*) FROM resources WHERE kind = 'net' AND name = 'd'`), "nothing written")

		f.tearDownFinalized()
		require.False(t, f.exists(u))
		res := f.compose(task, Composition{ // once it is gone, the same composition applies
			Children: []Child{{Kind: "fin", Name: "u"}, {Kind: "net", Name: "d"}},
			Edges:    []Edge{{Dependent: "d", Dependency: Ref{Child: "u"}}}})
		require.Equal(t, 2, res.Created)
	})
	t.Run("a dependent the mark already holds keeps its edge", func(t *testing.T) {
		t.Parallel()
		f, task := composeFx(t)
		c := Composition{
			Children: []Child{{Kind: "fin", Name: "u"}, {Kind: "fin", Name: "d"}},
			Edges:    []Edge{{Dependent: "d", Dependency: Ref{Child: "u"}}}}
		f.compose(task, c)
		u, d := f.childID("fin", "u"), f.childID("fin", "d")
		f.exec(`SELECT request_resource_deletion($1)`, u)
		require.Equal(t, "Deleting", f.phase(d), "a dependent is in its dependency's tree")
		f.compose(task, c) // both being torn down: left alone, not refused
	})
}

// The dependent of an edge a compose removes — the edge dropped, or its
// upstream hard-deleted with it — goes through the gate in the same
// transaction: its gate may have opened, and nothing else would send it
// through before the reaper's lagging walk.
func TestCompose_GatesTheDependentsOfTheEdgesItRemoves(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		second Composition
	}{
		{"the edge dropped", Composition{Children: []Child{
			{Kind: "net", Name: "u"}, {Kind: "app", Name: "d", Spec: json.RawMessage(`{"image":"x"}`)}}}},
		{"the upstream dropped and hard-deleted", Composition{Children: []Child{
			{Kind: "app", Name: "d", Spec: json.RawMessage(`{"image":"x"}`)}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, task := composeFx(t)
			f.compose(task, Composition{
				Children: []Child{{Kind: "net", Name: "u"}, {Kind: "app", Name: "d", Spec: json.RawMessage(`{"image":"x"}`)}},
				Edges:    []Edge{{Dependent: "d", Dependency: Ref{Child: "u"}}}})
			d := f.childID("app", "d")
			require.False(t, f.isQueued(d), "d waits on u")

			res := f.compose(task, tc.second)
			require.Equal(t, 1, res.Scheduled, "%+v", res)
			require.Zero(t, scalar[int](f, `SELECT count(*) FROM resource_deps WHERE dependent_id = $1`, d))
			require.True(t, f.isQueued(d), "d has no upstream left")
		})
	}
}

// The mark reads its tree again once it holds the tree's locks: a compose
// that held a node's lock when the tree was first read commits before the
// mark's lock is granted, and what it added — a child under the root, a
// grandchild under a nested composite, a dependent's edge to a node — is
// marked with the rest.
func TestCascadeMark_MarksWhatACommitItWaitedForAdded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// hold runs in the writer's transaction: it locks what a compose
		// locks and adds a row to the tree of the deleted resource. It
		// returns the deleted resource and the added row.
		hold func(f *fx, tx pgx.Tx) (deleted, added uuid.UUID)
	}{
		{"a child under the root", func(f *fx, tx pgx.Tx) (uuid.UUID, uuid.UUID) {
			root := f.res("comp", "root")
			f.res("fin", "final", owner(root)) // keeps the root in Deleting
			lockRows(f, tx, `SELECT 1 FROM resources WHERE id = $1 FOR NO KEY UPDATE`, root)
			return root, insertChild(f, tx, "late", root)
		}},
		{"a grandchild under a nested composite", func(f *fx, tx pgx.Tx) (uuid.UUID, uuid.UUID) {
			root := f.res("comp", "root")
			mid := f.res("comp", "mid", owner(root))
			f.res("fin", "final", owner(mid))
			lockRows(f, tx, `SELECT 1 FROM resources WHERE id = $1 FOR NO KEY UPDATE`, mid)
			return root, insertChild(f, tx, "late", mid)
		}},
		{"a dependent's edge to a node", func(f *fx, tx pgx.Tx) (uuid.UUID, uuid.UUID) {
			ext := f.res("fin", "ext")
			other := f.res("comp", "other")
			lockRows(f, tx, `SELECT 1 FROM resources WHERE id = $1 FOR KEY SHARE`, ext)
			dep := insertChild(f, tx, "dep", other)
			_, err := tx.Exec(f.ctx, `INSERT INTO resource_deps (dependent_id, dependency_id, value_flows) VALUES ($1, $2, '[]')`, dep, ext)
			require.NoError(f.t, err)
			return ext, dep
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFx(t)
			f.kind("net", reactWorker)
			f.kind("fin", reactFinalizer)
			f.kind("comp", reactComposite)

			tx, err := f.pool.Begin(f.ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(f.ctx) }()
			deleted, added := tc.hold(f, tx)

			conn, err := f.pool.Acquire(f.ctx)
			require.NoError(t, err)
			defer conn.Release()
			pid := conn.Conn().PgConn().PID()
			done := make(chan error, 1)
			go func() {
				_, err := conn.Exec(context.WithoutCancel(f.ctx), `SELECT request_resource_deletion($1)`, deleted)
				done <- err
			}()
			require.Eventually(t, func() bool {
				return scalar[bool](f, `SELECT coalesce((SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1), false)`, pid)
			}, 30*time.Second, 5*time.Millisecond, "the delete request waits for the writer's lock")
			require.NoError(t, tx.Commit(f.ctx))
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(30 * time.Second):
				t.Fatal("the delete request did not finish after the writer committed")
			}

			require.Equal(t, "Deleting", f.phase(deleted))
			require.Equal(t, "Deleting", f.phase(added), "what the writer committed is in the tree the mark marks")
		})
	}
}

func lockRows(f *fx, tx pgx.Tx, sql string, args ...any) {
	f.t.Helper()
	_, err := tx.Exec(f.ctx, sql, args...)
	require.NoError(f.t, err)
}

// insertChild inserts a "fin" resource (a finalizer kind, so that marked it
// stays, Deleting, until its teardown runs) named name under owner in tx, as
// a compose's insert does.
func insertChild(f *fx, tx pgx.Tx, name string, owner uuid.UUID) uuid.UUID {
	f.t.Helper()
	id := uuid.New()
	_, err := tx.Exec(f.ctx, `
INSERT INTO resources (id, kind, version, name, owner_id, root_id, shard_id)
SELECT $1, 'fin', 'v1', $2, o.id, coalesce(o.root_id, o.id), shard_of($1) FROM resources o WHERE o.id = $3`, id, name, owner)
	require.NoError(f.t, err)
	return id
}

// An edge to a child of the root that the same composition stops emitting:
// the prune hard-deleted it (and the edge's insert then failed its foreign
// key, an error no ComposeError, retried for ever) or requested its teardown
// (and the new edge held that teardown for good). It is refused, and
// nothing is written.
func TestCompose_RefusesAnEdgeToAChildItPrunes(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"net", "fin"} {
		f, task := composeFx(t)
		f.compose(task, Composition{Children: []Child{{Kind: "app", Name: "a"}, {Kind: kind, Name: "old"}}})
		old := f.childID(kind, "old")
		_, err := f.st.ApplyCompose(f.ctx, task, Composition{Children: []Child{{Kind: "app", Name: "a"}},
			Edges: []Edge{{Dependent: "a", Dependency: Ref{Kind: kind, Name: "old"}}}})
		var ce *ComposeError
		require.ErrorAs(t, err, &ce, kind)
		require.Equal(t, ComposeError{Child: "a", Rule: "dependency_pruned", Message: ce.Message}, *ce, kind)
		require.False(t, ce.Transient(), "the same composition fails the same way")
		require.Equal(t, "Reconciling", f.phase(old), "%s: neither deleted nor torn down", kind)
		require.Zero(t, scalar[int](f, `SELECT count(*) FROM resource_deps`), kind)

		// Emitted again, the child is a fine dependency.
		f.compose(task, Composition{Children: []Child{{Kind: "app", Name: "a"}, {Kind: kind, Name: "old"}},
			Edges: []Edge{{Dependent: "a", Dependency: Ref{Kind: kind, Name: "old"}}}})
		require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM resource_deps WHERE dependency_id = $1`, old), kind)
	}
}

// Two compositions whose children depend on each other's (a1 → b2 → a1):
// neither compose saw a cycle among its own children, the second was
// written, and a delete of either tree then waited for good (a1 for its
// dependent b2, b2 for its dependent a1). The edge that closes the cycle is
// refused; one that does not is written.
func TestCompose_RefusesAnEdgeCycleThroughAnotherComposition(t *testing.T) {
	t.Parallel()
	f, t1 := composeFx(t)
	r2 := f.res("comp", "r2")
	f.schedule(r2)
	t2 := f.claimOne("comp")
	f.compose(t1, Composition{Children: []Child{{Kind: "fin", Name: "a1"}, {Kind: "net", Name: "n1"}},
		Edges: []Edge{{Dependent: "n1", Dependency: Ref{Child: "a1"}}}})
	f.compose(t2, Composition{Children: []Child{{Kind: "fin", Name: "b2"}},
		Edges: []Edge{{Dependent: "b2", Dependency: Ref{Kind: "net", Name: "n1"}}}})

	_, err := f.st.ApplyCompose(f.ctx, t1, Composition{Children: []Child{{Kind: "fin", Name: "a1"}, {Kind: "net", Name: "n1"}},
		Edges: []Edge{{Dependent: "n1", Dependency: Ref{Child: "a1"}}, {Dependent: "a1", Dependency: Ref{Kind: "fin", Name: "b2"}}}})
	var ce *ComposeError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "edge_cycle", ce.Rule)
	require.Equal(t, "a1", ce.Child)
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM resource_deps WHERE dependent_id = $1`, f.childID("fin", "a1")), "nothing written")

	// Dropping n1's edge to a1 in the same composition opens the cycle: b2
	// reaches a1 only through it.
	f.compose(t1, Composition{Children: []Child{{Kind: "fin", Name: "a1"}, {Kind: "net", Name: "n1"}},
		Edges: []Edge{{Dependent: "a1", Dependency: Ref{Kind: "fin", Name: "b2"}}}})
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM resource_deps WHERE dependent_id = $1`, f.childID("fin", "a1")))
}
