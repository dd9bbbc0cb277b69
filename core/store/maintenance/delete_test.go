package maintenance_test

import (
	"sort"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/pipeline"
)

// diamond is a composite R owning A, B, C, D, where B and C depend on A and D
// depends on B and C. Shards are spread so the teardown crosses partitions.
type diamond struct{ R, A, B, C, D string }

func (f *fixture) diamond(rootKind, childKind string) diamond {
	f.t.Helper()
	var d diamond
	d.R = f.res(res{kind: rootKind, name: "r", shard: 200})
	d.A = f.res(res{kind: childKind, name: "a", shard: 10, owner: d.R, root: d.R})
	d.B = f.res(res{kind: childKind, name: "b", shard: 40, owner: d.R, root: d.R})
	d.C = f.res(res{kind: childKind, name: "c", shard: 41, owner: d.R, root: d.R})
	d.D = f.res(res{kind: childKind, name: "d", shard: 90, owner: d.R, root: d.R})
	f.dep(d.B, d.A)
	f.dep(d.C, d.A)
	f.dep(d.D, d.B)
	f.dep(d.D, d.C)
	return d
}

func (d diamond) names() map[string]string {
	return map[string]string{d.R: "R", d.A: "A", d.B: "B", d.C: "C", d.D: "D"}
}

// queuedDeletes lists the resources with a delete task, by diamond name.
func (f *fixture) queuedDeletes(names map[string]string) []string {
	f.t.Helper()
	rows, err := f.db.Query(ctx, `SELECT resource_id::text FROM work_queue WHERE task_type = 'delete'`)
	require.NoError(f.t, err)
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		require.NoError(f.t, rows.Scan(&id))
		out = append(out, names[id])
	}
	sort.Strings(out)
	return out
}

// teardown plays a worker whose Deleter succeeded for resource id: the drain
// strips the task's finalizer and removes the task.
func (f *fixture) teardown(id string) {
	f.t.Helper()
	f.exec(`UPDATE resources SET finalizers = '{}' WHERE id = $1`, id)
	f.exec(`DELETE FROM work_queue WHERE resource_id = $1 AND task_type = 'delete'`, id)
}

func TestRequestResourceDeletion_TearsADiamondDownLeavesFirstRootLast(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "bom", finalizer: "bom.example/teardown", hasComposer: true, hasRollup: true})
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	d := f.diamond("bom", "net")
	names := d.names()

	marked := f.int(`SELECT request_resource_deletion($1, $2)`, d.R, t0)
	require.Equal(t, 5, marked, "the root's whole composition subtree is marked")
	require.Equal(t, 5, f.int(`SELECT count(*) FROM resources WHERE phase = 'Deleting' AND cardinality(finalizers) = 1`),
		"each marked row carries its kind's finalizer")

	var waves [][]string
	sweeper := f.at(t0)
	for range 10 {
		q := f.queuedDeletes(names)
		if len(q) == 0 {
			break
		}
		waves = append(waves, q)
		for id, n := range names {
			for _, x := range q {
				if x == n {
					f.teardown(id)
				}
			}
		}
		_, err := sweeper.SweepDeletable(ctx, shard.All, 1000)
		require.NoError(t, err)
	}
	require.Empty(t, cmp.Diff([][]string{{"D"}, {"B", "C"}, {"A"}, {"R"}}, waves),
		"dependents before dependencies, the composition root last")
	require.Zero(t, f.int(`SELECT count(*) FROM resources`), "the whole tree is gone")
	require.Zero(t, f.int(`SELECT count(*) FROM work_queue`))
}

func TestSweepDeletable_StuckFinalizerBlocksItsAncestorsForever(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "bom", finalizer: "bom.example/teardown"})
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	d := f.diamond("bom", "net")
	f.int(`SELECT request_resource_deletion($1, $2)`, d.R, t0)

	// D's Deleter never succeeds: its task fails and is re-pended, forever.
	sweeper := f.at(t0.Add(time.Hour))
	for range 5 {
		_, err := sweeper.SweepDeletable(ctx, shard.All, 1000)
		require.NoError(t, err)
	}
	require.Equal(t, []string{"D"}, f.queuedDeletes(d.names()), "no ancestor's teardown starts while D is present")
	require.Equal(t, 5, f.int(`SELECT count(*) FROM resources WHERE phase = 'Deleting'`),
		"the stuck row is surfaced (Deleting) and nothing above it is orphaned")
}

func TestRequestResourceDeletion_CollapsesAFinalizerFreeTreeAtOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "bom"})
	f.kind(kind{name: "leaf"})
	d := f.diamond("bom", "leaf")
	require.Equal(t, 5, f.int(`SELECT request_resource_deletion($1, $2)`, d.R, t0))
	require.Zero(t, f.int(`SELECT count(*) FROM resources`),
		"with no teardown to run the inline sweep loops until the root is gone")
}

func TestCascadeMarkForDeletion_FollowsOwnersAndDependentsTransitively(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	d := f.diamond("net", "net")
	other := f.res(res{kind: "net", name: "other-root"})
	outsider := f.res(res{kind: "net", name: "outsider", owner: other, root: other})
	f.dep(outsider, d.D) // another composition consumes D's output

	require.Equal(t, 5, f.int(`SELECT cascade_mark_for_deletion($1, $2)`, d.A, t0),
		"A and everything downstream of it: B, C, D and the outsider; D reached twice is marked once")
	var got []string
	rows, err := f.db.Query(ctx, `SELECT name FROM resources WHERE deletion_requested_at IS NOT NULL ORDER BY name`)
	require.NoError(t, err)
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		got = append(got, n)
	}
	require.Equal(t, []string{"a", "b", "c", "d", "outsider"}, got,
		"the owner R and the outsider's root are upstream: untouched")
	require.Zero(t, f.int(`SELECT count(*) FROM work_queue`), "marking enqueues nothing: that is the sweep's job")
}

func TestCascadeMarkForDeletion_TerminatesOnADependencyCycle(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	a := f.res(res{name: "a"})
	b := f.res(res{name: "b"})
	c := f.res(res{name: "c"})
	f.dep(a, b)
	f.dep(b, c)
	f.dep(c, a)
	require.Equal(t, 3, f.int(`SELECT cascade_mark_for_deletion($1, $2)`, a, t0))
}

func TestCascadeMarkForDeletion_SeedsFinalizersOnceAndDropsPendingReconciles(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	pending := f.res(res{kind: "net", gen: 2, lagging: true})
	leased := f.res(res{kind: "net", gen: 2, lagging: true, owner: pending})
	f.task(pending, "reconcile", "", t0, t0)
	f.task(leased, "reconcile", "w1", t0, t0)

	require.Equal(t, 2, f.int(`SELECT cascade_mark_for_deletion($1, $2)`, pending, t0))
	require.Empty(t, f.tasks(pending), "a pending reconcile of a marked row is dropped")
	require.Equal(t, []task{{taskType: "reconcile", trigger: "specChange", gen: 2, leased: true}}, f.tasks(leased),
		"an in-flight one finishes")

	f.exec(`UPDATE resources SET finalizers = '{}' WHERE id = $1`, leased) // its teardown already ran
	require.Zero(t, f.int(`SELECT cascade_mark_for_deletion($1, $2)`, pending, t0.Add(time.Minute)), "idempotent")
	require.Zero(t, f.int(`SELECT cardinality(finalizers) FROM resources WHERE id = $1`, leased),
		"a repeat request never re-seeds a stripped finalizer (the teardown would run twice)")
	var at time.Time
	require.NoError(t, f.db.QueryRow(ctx, `SELECT deletion_requested_at FROM resources WHERE id = $1`, pending).Scan(&at))
	require.True(t, at.Equal(t0), "the first request's instant stays")
}

func TestSweepDeletable_WaitsForEveryDependentStillPresent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	up := f.res(res{name: "up"})
	require.Equal(t, 1, f.int(`SELECT cascade_mark_for_deletion($1, $2)`, up, t0))
	late := f.res(res{name: "late"})
	f.dep(late, up) // a live dependent appeared after the mark

	n, err := f.at(t0).SweepDeletable(ctx, shard.All, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	require.True(t, f.exists(up), "a dependency is never removed from under a live dependent")

	f.exec(`DELETE FROM resources WHERE id = $1`, late)
	n, err = f.at(t0).SweepDeletable(ctx, shard.All, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.False(t, f.exists(up))
}

func TestSweepDeletable_HonoursRangeMaxAndIdleGate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	store := f.at(t0)

	n, err := store.SweepDeletable(ctx, shard.All, 100)
	require.NoError(t, err)
	require.Zero(t, n, "idle: nothing marked")

	for s := range 6 {
		f.res(res{shard: 20 + s, deleting: true})
	}
	fin := f.res(res{kind: "net", shard: 21, deleting: true, finalizers: []string{"net.example/teardown"}})
	outside := f.res(res{shard: 60, deleting: true})

	n, err = store.SweepDeletable(ctx, shard.Between(16, 31), 4)
	require.NoError(t, err)
	require.Equal(t, 4, n, "at most p_max rows advanced per call")
	n, err = store.SweepDeletable(ctx, shard.Between(16, 31), 100)
	require.NoError(t, err)
	require.Equal(t, 3, n, "the rest of the range")
	require.Equal(t, []task{{taskType: "delete", trigger: "deleteRequested", gen: 1}}, f.tasks(fin))
	require.True(t, f.exists(outside), "another reaper's shard")

	n, err = store.SweepDeletable(ctx, shard.Between(16, 31), 100)
	require.NoError(t, err)
	require.Zero(t, n, "a queued delete task is not queued twice")
}

// The same diamond, torn down by the real worker round trip alone, no
// reaper tick: the request queues the first teardown, and each drain that
// finishes one removes its row and queues the next layer's.
func TestRequestResourceDeletion_DiamondThroughClaimAndDrain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.needs("drain_outbox_batch", "claim_budget")
	f.kind(kind{name: "bom", finalizer: "bom.example/teardown", hasComposer: true, hasRollup: true})
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	d := f.diamond("bom", "net")
	names := d.names()
	require.Equal(t, 5, f.int(`SELECT request_resource_deletion($1, $2)`, d.R, t0))
	require.Equal(t, []string{"D"}, f.queuedDeletes(names), "the request queues the unblocked leaf's teardown")

	var waves [][]string
	for i := range 10 {
		worked := f.work(t0.Add(time.Duration(i+1)*time.Second), pipeline.TaskDelete, `null`, "bom", "net")
		if len(worked) == 0 {
			break
		}
		var wave []string
		for _, id := range worked {
			wave = append(wave, names[id])
		}
		sort.Strings(wave)
		waves = append(waves, wave)
	}
	require.Empty(t, cmp.Diff([][]string{{"D"}, {"B", "C"}, {"A"}, {"R"}}, waves),
		"dependents before dependencies, the composition root last, each layer queued by the drain")
	require.Zero(t, f.int(`SELECT count(*) FROM resources`), "the drain removed every row")
	require.Zero(t, f.int(`SELECT count(*) FROM work_queue`))
}
