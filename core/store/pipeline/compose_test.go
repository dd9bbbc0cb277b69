package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// composeFx: a composite root kind "comp" over leaf kinds, its root claimed.
func composeFx(t *testing.T, leafExtra ...string) (*fx, Task) {
	t.Helper()
	f := newFx(t)
	f.kind("net", reactWorker, leafExtra...)
	f.kind("app", reactWorker, leafExtra...)
	f.kind("fin", reactFinalizer)
	f.kind("comp", reactComposite)
	root := f.res("comp", "root")
	f.schedule(root)
	return f, f.claimOne("comp")
}

func (f *fx) childID(kind, name string) uuid.UUID {
	f.t.Helper()
	return scalar[uuid.UUID](f, `SELECT id FROM resources WHERE kind = $1 AND name = $2`, kind, name)
}

func (f *fx) compose(task Task, c Composition) ComposeResult {
	f.t.Helper()
	res, err := f.st.ApplyCompose(f.ctx, task, c)
	require.NoError(f.t, err)
	return res
}

func netApp(netSpec string) Composition {
	return Composition{
		Children: []Child{
			{Kind: "net", Name: "net-a", Spec: json.RawMessage(netSpec), Labels: map[string]string{"tier": "net"}},
			{Kind: "app", Name: "app-a", Spec: json.RawMessage(`{"image":"x"}`)},
		},
		Edges: []Edge{{Dependent: "app-a", Dependency: Ref{Child: "net-a"},
			ValueFlows: []ValueFlow{{SrcField: "/net_id", DepField: "/net_id"}}}},
		Configs: []Config{{Kind: "app", Name: "app-cfg", Spec: json.RawMessage(`{"bucket":"b"}`)}},
	}
}

func TestCompose_CreatesChildrenEdgesConfigsAndSchedules(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	res := f.compose(task, netApp(`{"cidr":"10.0.0.0/16"}`))
	require.Equal(t, ComposeResult{Created: 2, Edges: 1, Configs: 1, Scheduled: 1}, res)

	root := task.Key.ResourceID
	net, app := f.childID("net", "net-a"), f.childID("app", "app-a")
	for _, id := range []uuid.UUID{net, app} {
		var owner, top uuid.UUID
		var shardOK bool
		require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT owner_id, root_id, shard_id = shard_of(id) FROM resources WHERE id = $1`, id).
			Scan(&owner, &top, &shardOK))
		require.Equal(t, root, owner)
		require.Equal(t, root, top)
		require.True(t, shardOK)
	}
	require.JSONEq(t, `{"tier":"net"}`, scalar[string](f, `SELECT labels::text FROM resources WHERE id = $1`, net))
	require.True(t, f.isQueued(net), "the net has no upstream: scheduled")
	require.False(t, f.isQueued(app), "the app waits on its net")
	require.JSONEq(t, `[{"src_field":"/net_id","dep_field":"/net_id"}]`,
		scalar[string](f, `SELECT value_flows::text FROM resource_deps WHERE dependent_id = $1 AND dependency_id = $2`, app, net))
	require.Equal(t, root, scalar[uuid.UUID](f, `SELECT owner_id FROM providerconfigs WHERE name = 'app-cfg'`))
	require.EqualValues(t, 1, scalar[int64](f, `SELECT composed_gen FROM resources WHERE id = $1`, root))
	require.Equal(t, []string{"Normal Composed"}, f.events(root))
}

func TestCompose_AppliesOnlyTheDelta(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	f.compose(task, netApp(`{"cidr":"10.0.0.0/16"}`))
	net := f.childID("net", "net-a")
	xmin := scalar[string](f, `SELECT string_agg(xmin::text, ',' ORDER BY id) FROM resources WHERE id <> $1`, task.Key.ResourceID)

	res := f.compose(task, netApp(`{"cidr":"10.0.0.0/16"}`))
	require.False(t, res.Changed(), "the same composition writes nothing")
	require.Equal(t, xmin, scalar[string](f, `SELECT string_agg(xmin::text, ',' ORDER BY id) FROM resources WHERE id <> $1`, task.Key.ResourceID),
		"no child row rewritten")
	require.Len(t, f.events(task.Key.ResourceID), 1, "no second Composed event")

	res = f.compose(task, netApp(`{"cidr":"10.1.0.0/16"}`))
	require.Equal(t, ComposeResult{Updated: 1, Scheduled: 1}, res)
	require.EqualValues(t, 2, f.state(net).Generation, "the spec change bumped the child's generation")
	q, _ := f.queued(net, TaskReconcile)
	require.EqualValues(t, 2, q.Generation, "…and raised its pending row")
}

func TestCompose_ReadoptsOrphanedChildren(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t, `"orphan_grace_secs": 600`)
	cases := []struct {
		reason string
		child  Child
		gen    int64
	}{
		{reason: "re-emitted unchanged", child: Child{Kind: "net", Name: "n", Spec: json.RawMessage(`{"v":1}`)}, gen: 1},
		{reason: "re-emitted with a changed spec", child: Child{Kind: "net", Name: "n", Spec: json.RawMessage(`{"v":2}`)}, gen: 2},
		{reason: "re-emitted with changed labels only", child: Child{Kind: "net", Name: "n", Spec: json.RawMessage(`{"v":2}`),
			Labels: map[string]string{"x": "y"}}, gen: 2},
	}
	keep := Child{Kind: "net", Name: "keep"}
	f.compose(task, Composition{Children: []Child{keep, {Kind: "net", Name: "n", Spec: json.RawMessage(`{"v":1}`)}}})
	n := f.childID("net", "n")
	for _, tc := range cases {
		res := f.compose(task, Composition{Children: []Child{keep}})
		require.Equal(t, 1, res.Orphaned, tc.reason)
		require.Equal(t, "Orphaned", f.phase(n), tc.reason)
		require.True(t, scalar[bool](f, `SELECT frozen_until BETWEEN now() + interval '599 seconds' AND now() + interval '601 seconds' FROM resources WHERE id = $1`, n))

		res = f.compose(task, Composition{Children: []Child{keep, tc.child}})
		require.Equal(t, 1, res.Readopted, tc.reason)
		require.Equal(t, 1, res.Updated, tc.reason)
		require.False(t, scalar[bool](f, `SELECT frozen_until IS NOT NULL FROM resources WHERE id = $1`, n), tc.reason)
		require.Equal(t, tc.gen, f.state(n).Generation, tc.reason)
		require.Equal(t, n, f.childID("net", "n"), "the same row, never recreated: %s", tc.reason)
	}

	f.set(n, `frozen_until = 'infinity'`)
	f.exec(`DELETE FROM work_queue WHERE resource_id = $1`, n) // quarantine drops pending work
	res := f.compose(task, Composition{Children: []Child{keep}})
	require.Zero(t, res.Orphaned+res.Deleted, "a quarantined child is not pruned")
	res = f.compose(task, Composition{Children: []Child{keep, {Kind: "net", Name: "n", Spec: json.RawMessage(`{"v":3}`)}}})
	require.Equal(t, "Quarantined", f.phase(n), "a re-emit never lifts a quarantine")
	require.Zero(t, res.Readopted)
	require.EqualValues(t, 3, f.state(n).Generation, "the new spec is persisted while quarantined")
	require.False(t, f.isQueued(n))
}

func TestCompose_PrunesVanishedChildrenByKindPolicy(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	f.kind("graced", reactWorker, `"orphan_grace_secs": 60`)
	all := Composition{Children: []Child{{Kind: "net", Name: "plain"}, {Kind: "fin", Name: "final"}, {Kind: "graced", Name: "graced"}}}
	f.compose(task, all)
	plain, final, graced := f.childID("net", "plain"), f.childID("fin", "final"), f.childID("graced", "graced")
	require.True(t, f.isQueued(plain))

	res := f.compose(task, Composition{})
	require.Equal(t, 1, res.Deleted)
	require.Equal(t, 1, res.Teardown)
	require.Equal(t, 1, res.Orphaned)
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM resources WHERE id = $1`, plain), "no finalizer, no grace: hard-deleted")
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM work_queue WHERE resource_id = $1`, plain), "…with its queued work")
	require.Equal(t, "Deleting", f.phase(final), "a finalizer kind goes through request_resource_deletion")
	require.Equal(t, "Orphaned", f.phase(graced))
}

func TestCompose_RejectsAnInvalidChildSpecAndWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("net", reactWorker, `"spec_schema": {"type":"object","properties":{"cidr":{"type":"string"}},"required":["cidr"]}`)
	f.kind("comp", reactComposite)
	root := f.res("comp", "root")
	f.schedule(root)
	task := f.claimOne("comp")

	_, err := f.st.ApplyCompose(f.ctx, task, Composition{Children: []Child{
		{Kind: "net", Name: "good", Spec: json.RawMessage(`{"cidr":"10.0.0.0/8"}`)},
		{Kind: "net", Name: "bad", Spec: json.RawMessage(`{"cidr":8}`)},
	}})
	var ce *ComposeError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, ComposeError{Child: "bad", Axis: "spec", Pointer: "/cidr", Rule: "type", Message: ce.Message}, *ce)
	require.Contains(t, err.Error(), `child "bad": spec/cidr`)
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM resources`), "nothing written")
	require.Zero(t, scalar[int64](f, `SELECT composed_gen FROM resources WHERE id = $1`, root))
}

func TestCompose_RefusesMalformedCompositions(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	f.res("net", "taken")
	cases := map[string]struct {
		reason string
		c      Composition
		rule   string
	}{
		"duplicate": {reason: "edges refer to children by name", rule: "duplicate_child",
			c: Composition{Children: []Child{{Kind: "net", Name: "a"}, {Kind: "app", Name: "a"}}}},
		"unknown kind": {reason: "every child's kind needs a manifest", rule: "unknown_kind",
			c: Composition{Children: []Child{{Kind: "ghost", Name: "a"}}}},
		"bad name": {reason: "names follow the resources CHECK", rule: "name_invalid",
			c: Composition{Children: []Child{{Kind: "net", Name: "A_"}}}},
		"owned elsewhere": {reason: "a (kind, name) another owner holds", rule: "owned_elsewhere",
			c: Composition{Children: []Child{{Kind: "net", Name: "taken"}}}},
		"unknown dependency": {reason: "an edge to nothing", rule: "unknown_dependency",
			c: Composition{Children: []Child{{Kind: "net", Name: "a"}}, Edges: []Edge{{Dependent: "a", Dependency: Ref{Child: "b"}}}}},
		"cycle": {reason: "a cycle would never schedule", rule: "edge_cycle",
			c: Composition{Children: []Child{{Kind: "net", Name: "a"}, {Kind: "net", Name: "b"}},
				Edges: []Edge{{Dependent: "a", Dependency: Ref{Child: "b"}}, {Dependent: "b", Dependency: Ref{Child: "a"}}}}},
		"bad flow": {reason: "flows are JSON pointers", rule: "value_flow_invalid",
			c: Composition{Children: []Child{{Kind: "net", Name: "a"}, {Kind: "net", Name: "b"}},
				Edges: []Edge{{Dependent: "a", Dependency: Ref{Child: "b"}, ValueFlows: []ValueFlow{{SrcField: "id", DepField: "/id"}}}}}},
		"bad label key": {reason: "a child's labels follow the API's rules", rule: "label_key_invalid",
			c: Composition{Children: []Child{{Kind: "net", Name: "a", Labels: map[string]string{"bad key!": "x"}}}}},
		"too many labels": {reason: "the API's label limit holds for a child", rule: "label_count",
			c: Composition{Children: []Child{{Kind: "net", Name: "a", Labels: manyLabels(65)}}}},
		"spec array": {reason: "a spec is a JSON object, whatever the schema admits", rule: "type",
			c: Composition{Children: []Child{{Kind: "net", Name: "a", Spec: json.RawMessage(`[1]`)}}}},
		"spec null": {reason: "a spec is a JSON object", rule: "type",
			c: Composition{Children: []Child{{Kind: "net", Name: "a", Spec: json.RawMessage(`null`)}}}},
		"spec malformed": {reason: "a composer's malformed spec is its failure, not the database's", rule: "malformed",
			c: Composition{Children: []Child{{Kind: "net", Name: "a", Spec: json.RawMessage(`{"a":`)}}}},
		"spec with NUL": {reason: "jsonb cannot store \\u0000", rule: "malformed",
			c: Composition{Children: []Child{{Kind: "net", Name: "a", Spec: json.RawMessage(`{"a":"\u0000"}`)}}}},
		"spec with a lone surrogate": {reason: "jsonb stores no escaped surrogate outside a pair (encoding/json.Valid takes it)", rule: "malformed",
			c: Composition{Children: []Child{{Kind: "net", Name: "a", Spec: json.RawMessage(`{"a":"\ud800"}`)}}}},
		"spec not UTF-8": {reason: "jsonb stores only UTF-8", rule: "malformed",
			c: Composition{Children: []Child{{Kind: "net", Name: "a", Spec: json.RawMessage("{\"a\":\"\xff\"}")}}}},
		"bad config ref": {reason: "a config reference is a config name", rule: "name_invalid",
			c: Composition{Children: []Child{{Kind: "net", Name: "a", ProviderConfigRef: "NOPE!"}}}},
	}
	for name, tc := range cases {
		_, err := f.st.ApplyCompose(f.ctx, task, tc.c)
		var ce *ComposeError
		require.ErrorAs(t, err, &ce, name)
		require.Equal(t, tc.rule, ce.Rule, "%s: %s", name, tc.reason)
	}
	require.Equal(t, 2, scalar[int](f, `SELECT count(*) FROM resources`), "nothing written")
}

func manyLabels(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("k%d", i)] = "v"
	}
	return m
}

func TestCompose_RefusesAChildOwnedElsewhereAndWritesNothing(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	f.res("net", "taken")
	c := netApp(`{}`)
	c.Children = append(c.Children, Child{Kind: "net", Name: "taken"})
	_, err := f.st.ApplyCompose(f.ctx, task, c)
	var ce *ComposeError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, ComposeError{Child: "taken", Rule: "owned_elsewhere",
		Message: "resource net/taken exists and is not owned by this root"}, *ce)
	require.Equal(t, 2, scalar[int](f, `SELECT count(*) FROM resources`), "the other children's inserts rolled back")
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM resource_deps`))
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM providerconfigs`))
	require.Zero(t, scalar[int64](f, `SELECT composed_gen FROM resources WHERE id = $1`, task.Key.ResourceID))
}

func TestCompose_IsFencedOnTheClaimEpoch(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	_, err := f.st.Release(f.ctx, all, []TaskKey{task.Key})
	require.NoError(t, err)
	_, err = f.st.ApplyCompose(f.ctx, task, netApp(`{}`))
	require.True(t, errors.Is(err, ErrFenced), "a released claim cannot compose: %v", err)
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM resources`))
}

func TestCompose_BootstrapsValueFlowsFromUpstreamsWithStatus(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	shared := f.res("net", "shared")
	f.set(shared, `status = '{"vpc":{"id":"vpc-9"}}', synced_gen = generation`)
	c := Composition{
		Children: []Child{{Kind: "app", Name: "app-a", Spec: json.RawMessage(`{"image":"x"}`)}},
		Edges: []Edge{{Dependent: "app-a", Dependency: Ref{Kind: "net", Name: "shared"},
			ValueFlows: []ValueFlow{{SrcField: "/vpc/id", DepField: "/network/vpc_id"}}}},
	}
	f.compose(task, c)
	app := f.childID("app", "app-a")
	require.JSONEq(t, `{"image":"x","network":{"vpc_id":"vpc-9"}}`, scalar[string](f, `SELECT spec::text FROM resources WHERE id = $1`, app))
	require.EqualValues(t, 1, f.state(app).Generation, "created with the value in place, no extra generation")
	require.True(t, f.isQueued(app), "the upstream is synced: scheduled")

	res := f.compose(task, c)
	require.False(t, res.Changed(), "a recompose reproduces the flowed value instead of reverting it")
}

// TestCompose_BootstrapsValueFlowsFromSiblingsOnceTheyHaveStatus: a
// sibling created by this composition has no status to flow (the first
// composition writes the specs as given); once it has one, a recompose
// substitutes it into exactly the children whose edges carry a flow, each
// into its own spec.
func TestCompose_BootstrapsValueFlowsFromSiblingsOnceTheyHaveStatus(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	flow := []ValueFlow{{SrcField: "/net_id", DepField: "/net_id"}}
	c := Composition{
		Children: []Child{
			{Kind: "net", Name: "net-a", Spec: json.RawMessage(`{}`)},
			{Kind: "app", Name: "app-plain", Spec: json.RawMessage(`{"image":"p"}`)},
			{Kind: "app", Name: "app-1", Spec: json.RawMessage(`{"image":"1"}`)},
			{Kind: "app", Name: "app-2", Spec: json.RawMessage(`{"image":"2"}`)},
		},
		Edges: []Edge{
			{Dependent: "app-plain", Dependency: Ref{Child: "net-a"}},
			{Dependent: "app-1", Dependency: Ref{Child: "net-a"}, ValueFlows: flow},
			{Dependent: "app-2", Dependency: Ref{Child: "net-a"}, ValueFlows: flow},
		},
	}
	specOf := func(name string) string {
		return scalar[string](f, `SELECT spec::text FROM resources WHERE id = $1`, f.childID("app", name))
	}
	f.compose(task, c)
	require.JSONEq(t, `{"image":"1"}`, specOf("app-1"), "a fresh sibling has nothing to flow")

	f.set(f.childID("net", "net-a"), `status = '{"net_id":"n-7"}', synced_gen = generation`)
	f.compose(task, c)
	require.JSONEq(t, `{"image":"p"}`, specOf("app-plain"))
	require.JSONEq(t, `{"image":"1","net_id":"n-7"}`, specOf("app-1"))
	require.JSONEq(t, `{"image":"2","net_id":"n-7"}`, specOf("app-2"))
}

func TestCompose_RefusesAConfigOwnedElsewhere(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	f.exec(`INSERT INTO providerconfigs (kind, name, spec) VALUES ('app', 'app-cfg', '{}')`)
	_, err := f.st.ApplyCompose(f.ctx, task, netApp(`{}`))
	var ce *ComposeError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "owned_elsewhere", ce.Rule)

	f.exec(`DELETE FROM providerconfigs`)
	f.compose(task, netApp(`{}`))
	c := netApp(`{}`)
	c.Configs = nil
	res := f.compose(task, c)
	require.Equal(t, 1, res.Configs, "a vanished owned config is pruned")
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM providerconfigs`))
}

func TestCompose_GatesOnlyChildrenNotWaitingOnAFreshSibling(t *testing.T) {
	t.Parallel()
	a, b, c, d, old := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	plan := &composePlan{edges: []plannedEdge{
		{dep: b, up: a},   // b waits on a, created in the same compose
		{dep: c, up: b},   // c waits on b, also fresh
		{dep: d, up: old}, // d waits on a resource outside the compose
		{dep: old, up: a}, // an updated child waiting on a fresh one
	}}
	cases := map[string]struct {
		reason           string
		created, updated []uuid.UUID
		want             []uuid.UUID
	}{
		"chain": {
			reason:  "only the head of a chain of fresh children can be ready; the cascade schedules the rest",
			created: []uuid.UUID{a, b, c},
			want:    []uuid.UUID{a},
		},
		"outside upstream": {
			reason:  "an upstream the compose did not create may be synced already: the gate decides",
			created: []uuid.UUID{d},
			want:    []uuid.UUID{d},
		},
		"updated child": {
			reason:  "a changed child always goes through the gate, whatever its upstreams",
			created: []uuid.UUID{a}, updated: []uuid.UUID{old},
			want: []uuid.UUID{a, old},
		},
		"upstream not fresh": {
			reason:  "b's upstream a was not created by this compose: b goes through the gate",
			created: []uuid.UUID{b},
			want:    []uuid.UUID{b},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, gateCandidates(plan, tc.created, tc.updated)); diff != "" {
				t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

func TestCompose_AChainOfFreshChildrenIsScheduledByTheCascade(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	c := Composition{
		Children: []Child{
			{Kind: "net", Name: "net-a", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)},
			{Kind: "app", Name: "app-a", Spec: json.RawMessage(`{"image":"x"}`)},
			{Kind: "app", Name: "app-b", Spec: json.RawMessage(`{"image":"y"}`)},
		},
		Edges: []Edge{
			{Dependent: "app-a", Dependency: Ref{Child: "net-a"}, ValueFlows: []ValueFlow{{SrcField: "/net_id", DepField: "/net_id"}}},
			{Dependent: "app-b", Dependency: Ref{Child: "app-a"}},
		},
	}
	res := f.compose(task, c)
	require.Equal(t, 1, res.Scheduled, "only the net is queued at compose")
	net, appA, appB := f.childID("net", "net-a"), f.childID("app", "app-a"), f.childID("app", "app-b")
	require.True(t, f.isQueued(net))
	require.False(t, f.isQueued(appA), "app-a waits on its net")
	require.False(t, f.isQueued(appB), "app-b waits on app-a")

	require.Equal(t, 1, f.runLeaves("net", func(Task) string { return `{"net_id":"n-1"}` }))
	require.True(t, f.isQueued(appA), "the net synced: the cascade queued app-a")
	require.False(t, f.isQueued(appB), "app-b still waits on app-a")
	require.JSONEq(t, `{"image":"x","net_id":"n-1"}`, scalar[string](f, `SELECT spec::text FROM resources WHERE id = $1`, appA))

	ts := f.claim("app", 10)
	require.Len(t, ts, 1, "only app-a is claimable")
	require.Equal(t, appA, ts[0].Key.ResourceID)
	f.finish(ts[0].Result(json.RawMessage(`{}`)))
	require.True(t, f.isQueued(appB), "app-a synced: the cascade queued app-b")
}

// A composition larger than one statement's chunk is written whole, in one
// transaction: every child, its labels and phase row; a change anywhere in
// it is found; and a taken name in its last chunk leaves nothing written,
// not even the chunks before it.
func TestCompose_WritesALargeCompositionInChunks(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	root := task.Key.ResourceID
	n := 2*composeChunk + 7
	big := func(changed ...int) Composition {
		var c Composition
		for i := range n {
			spec := `{"cidr":"10.0.0.0/16"}`
			for _, j := range changed {
				if i == j {
					spec = `{"cidr":"10.9.0.0/16"}`
				}
			}
			c.Children = append(c.Children, Child{Kind: "net", Name: fmt.Sprintf("net-%04d", i), Spec: json.RawMessage(spec),
				Labels: map[string]string{"tier": "net", "n": fmt.Sprint(i)}})
		}
		return c
	}

	res := f.compose(task, big())
	require.Equal(t, n, res.Created)
	require.Equal(t, n, scalar[int](f, `SELECT count(*) FROM resources WHERE owner_id = $1`, root))
	require.Equal(t, n, scalar[int](f, `SELECT count(*) FROM resource_phases WHERE owner_id = $1`, root))
	require.Equal(t, 2*n, scalar[int](f, `SELECT count(*) FROM resource_labels l JOIN resources r ON r.id = l.resource_id WHERE r.owner_id = $1`, root))
	require.JSONEq(t, `{"tier":"net","n":"`+fmt.Sprint(n-1)+`"}`,
		scalar[string](f, `SELECT labels::text FROM resources WHERE kind = 'net' AND name = $1`, fmt.Sprintf("net-%04d", n-1)))

	// one change in each chunk, the last one partial
	changed := []int{0, composeChunk, n - 1}
	xmin := func() string {
		return scalar[string](f, `SELECT string_agg(xmin::text, ',' ORDER BY name) FROM resources WHERE owner_id = $1 AND name NOT IN ($2, $3, $4)`,
			root, fmt.Sprintf("net-%04d", changed[0]), fmt.Sprintf("net-%04d", changed[1]), fmt.Sprintf("net-%04d", changed[2]))
	}
	before := xmin()
	res = f.compose(task, big(changed...))
	require.Equal(t, 0, res.Created)
	require.Equal(t, len(changed), res.Updated)
	require.Equal(t, before, xmin(), "the unchanged children are not rewritten")
	for _, i := range changed {
		require.JSONEq(t, `{"cidr":"10.9.0.0/16"}`,
			scalar[string](f, `SELECT spec::text FROM resources WHERE kind = 'net' AND name = $1`, fmt.Sprintf("net-%04d", i)))
	}

	// a name another owner holds, in the last chunk, after a change in the first
	f.res("net", "taken")
	c := big()
	c.Children = append(c.Children, Child{Kind: "net", Name: "taken"})
	_, err := f.st.ApplyCompose(f.ctx, task, c)
	var ce *ComposeError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, "owned_elsewhere", ce.Rule)
	require.Equal(t, n, scalar[int](f, `SELECT count(*) FROM resources WHERE owner_id = $1`, root))
	require.JSONEq(t, `{"cidr":"10.9.0.0/16"}`,
		scalar[string](f, `SELECT spec::text FROM resources WHERE kind = 'net' AND name = 'net-0000'`),
		"the first chunk's update rolled back with the refusal")
}

func TestCompose_RefusesMalformedConfigsAndWritesNothing(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	f.exec(`INSERT INTO providerconfigs (kind, name, is_default, spec) VALUES ('app', 'default', true, '{}')`)
	cases := map[string]struct {
		reason string
		cfgs   []Config
		child  string
		rule   string
	}{
		"spec malformed": {reason: "a composer's malformed config is its failure, not the database's", child: "c1", rule: "malformed",
			cfgs: []Config{{Kind: "net", Name: "c1", Spec: json.RawMessage(`{`)}}},
		"spec array": {reason: "a config's spec is a JSON object, as the API has it", child: "c1", rule: "type",
			cfgs: []Config{{Kind: "net", Name: "c1", Spec: json.RawMessage(`[]`)}}},
		"data malformed": {reason: "data is JSON", child: "c1", rule: "malformed",
			cfgs: []Config{{Kind: "net", Name: "c1", Data: json.RawMessage(`{`)}}},
		"data with NUL": {reason: `jsonb cannot store \u0000`, child: "c1", rule: "malformed",
			cfgs: []Config{{Kind: "net", Name: "c1", Data: json.RawMessage(`"\u0000"`)}}},
		"two defaults": {reason: "a kind has one default config", child: "c2", rule: "duplicate_default",
			cfgs: []Config{{Kind: "net", Name: "c1", IsDefault: true}, {Kind: "net", Name: "c2", IsDefault: true}}},
		"default taken": {reason: "the kind's default is another's", child: "c1", rule: "owned_elsewhere",
			cfgs: []Config{{Kind: "net", Name: "n1"}, {Kind: "app", Name: "c1", IsDefault: true}}},
	}
	for name, tc := range cases {
		_, err := f.st.ApplyCompose(f.ctx, task, Composition{Children: []Child{{Kind: "net", Name: "a"}}, Configs: tc.cfgs})
		var ce *ComposeError
		require.ErrorAs(t, err, &ce, "%s: %v", name, err)
		require.Equal(t, tc.rule, ce.Rule, "%s: %s", name, tc.reason)
		require.Equal(t, tc.child, ce.Child, name)
	}
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM resources`), "nothing written")
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM providerconfigs`), "nothing written")

	// The root's own default, renamed: the old one goes as the new one comes.
	f.exec(`DELETE FROM providerconfigs`)
	f.compose(task, Composition{Configs: []Config{{Kind: "net", Name: "d1", IsDefault: true}}})
	f.compose(task, Composition{Configs: []Config{{Kind: "net", Name: "d2", IsDefault: true}}})
	require.Equal(t, "d2", scalar[string](f, `SELECT string_agg(name, ',') FROM providerconfigs`))
}

// TestCompose_RefusesAConfigRefTheAPIWouldRefuse: a child's
// providerConfigRef names an existing non-default config of its kind, as
// the API has it for an applied resource — one the composition itself
// emits, or one that exists and this compose does not prune. A dangling
// ref was written, and the child then ran with its kind's default config
// (schedule_candidates snapshots no config for it), silently.
func TestCompose_RefusesAConfigRefTheAPIWouldRefuse(t *testing.T) {
	t.Parallel()
	f, task := composeFx(t)
	f.exec(`INSERT INTO providerconfigs (kind, name, is_default, spec) VALUES
	        ('net', 'net-default', true, '{}'), ('net', 'fast', false, '{}'), ('app', 'fast-app', false, '{}')`)
	cases := map[string]struct {
		reason string
		c      Composition
		rule   string
		msg    string
	}{
		"missing": {reason: "no such config", rule: "not_found",
			msg: `kind net has no providerconfig "nope"`,
			c:   Composition{Children: []Child{{Kind: "net", Name: "a", ProviderConfigRef: "nope"}}}},
		"another kind's": {reason: "a ref names a config of the child's own kind", rule: "not_found",
			msg: `kind net has no providerconfig "fast-app"`,
			c:   Composition{Children: []Child{{Kind: "net", Name: "a", ProviderConfigRef: "fast-app"}}}},
		"the default": {reason: "the default applies without a ref", rule: "default_config",
			msg: "providerconfig net/net-default is the kind's default: it applies without a ref; a ref names a non-default config",
			c:   Composition{Children: []Child{{Kind: "net", Name: "a", ProviderConfigRef: "net-default"}}}},
		"a composed default": {reason: "a default the composition emits is a default too", rule: "default_config",
			msg: "providerconfig app/mine is the kind's default: it applies without a ref; a ref names a non-default config",
			c: Composition{Children: []Child{{Kind: "app", Name: "a", ProviderConfigRef: "mine"}},
				Configs: []Config{{Kind: "app", Name: "mine", IsDefault: true}}}},
	}
	for name, tc := range cases {
		_, err := f.st.ApplyCompose(f.ctx, task, tc.c)
		var ce *ComposeError
		require.ErrorAs(t, err, &ce, "%s: %v", name, err)
		require.Equal(t, ComposeError{Child: "a", Axis: "providerConfigRef", Rule: tc.rule, Message: tc.msg}, *ce,
			"%s: %s", name, tc.reason)
	}
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM resources`), "nothing written")

	// An existing config, and one the composition emits beside the child.
	f.compose(task, Composition{
		Children: []Child{{Kind: "net", Name: "a", ProviderConfigRef: "fast"}, {Kind: "app", Name: "b", ProviderConfigRef: "mine"}},
		Configs:  []Config{{Kind: "app", Name: "mine"}},
	})
	require.Equal(t, "fast", scalar[string](f, `SELECT provider_config_ref FROM resources WHERE name = 'a'`))
	require.Equal(t, "mine", scalar[string](f, `SELECT provider_config_ref FROM resources WHERE name = 'b'`))

	// A config the root owns and this composition no longer emits is pruned
	// by it: the ref would dangle the moment the compose commits.
	_, err := f.st.ApplyCompose(f.ctx, task, Composition{
		Children: []Child{{Kind: "net", Name: "a", ProviderConfigRef: "fast"}, {Kind: "app", Name: "b", ProviderConfigRef: "mine"}},
	})
	var ce *ComposeError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, ComposeError{Child: "b", Axis: "providerConfigRef", Rule: "not_found",
		Message: `providerconfig app/mine is owned by this root and the composition no longer emits it, so it is pruned; emit it, or drop the ref`}, *ce)
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM providerconfigs WHERE name = 'mine'`), "nothing written")
}
