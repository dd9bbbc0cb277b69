package pipeline

import (
	"encoding/json"
	"sort"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestCascade_DiamondDAGSchedulesInDependencyOrder(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	a, b, c, d := f.res("leaf", "a"), f.res("leaf", "b"), f.res("leaf", "c"), f.res("leaf", "d")
	f.edge(b, a)
	f.edge(c, a)
	f.edge(d, b)
	f.edge(d, c)
	f.schedule(a, b, c, d)

	var rounds [][]string
	for {
		ts := f.claim("leaf", 10)
		if len(ts) == 0 {
			break
		}
		var names []string
		var rs []Result
		for _, task := range ts {
			names = append(names, task.Resource.Name)
			rs = append(rs, task.Result(json.RawMessage(`{}`)))
		}
		sort.Strings(names)
		rounds = append(rounds, names)
		f.finish(rs...)
	}
	require.Equal(t, [][]string{{"a"}, {"b", "c"}, {"d"}}, rounds)
	for _, id := range []uuid.UUID{a, b, c, d} {
		require.Equal(t, "Ready", f.phase(id))
	}
}

func TestCascade_ValueFlowsResubstituteWhenUpstreamStatusChanges(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	vpc := f.res("leaf", "vpc")
	subnet := f.res("leaf", "subnet", spec(`{"cidr":"10.0.1.0/24"}`))
	f.edge(subnet, vpc, `[{"src_field":"/vpc_id","dep_field":"/vpc_id"},{"src_field":"/net/id","dep_field":"/attach/net_id"}]`)
	f.schedule(vpc, subnet)

	f.finish(f.claimOne("leaf").Result(json.RawMessage(`{"vpc_id":"v-1","net":{"id":7}}`)))
	require.JSONEq(t, `{"cidr":"10.0.1.0/24","vpc_id":"v-1","attach":{"net_id":7}}`, scalar[string](f, `SELECT spec::text FROM resources WHERE id = $1`, subnet))
	q, ok := f.queued(subnet, TaskReconcile)
	require.True(t, ok, "the upstream synced: the dependent is scheduled")
	require.EqualValues(t, 2, q.Generation, "scheduled at the generation the substitution bumped to")
	f.finish(f.claimOne("leaf").Result(json.RawMessage(`{}`)))
	require.Equal(t, "Ready", f.phase(subnet))

	cases := []struct {
		reason string
		status string
		spec   string
		gen    int64
	}{
		{reason: "the upstream's status changed on a resync: re-substituted and re-scheduled",
			status: `{"vpc_id":"v-2","net":{"id":7}}`, spec: `{"cidr":"10.0.1.0/24","vpc_id":"v-2","attach":{"net_id":7}}`, gen: 3},
		{reason: "a status change outside the flowed fields changes nothing downstream",
			status: `{"vpc_id":"v-2","net":{"id":7},"other":1}`, spec: `{"cidr":"10.0.1.0/24","vpc_id":"v-2","attach":{"net_id":7}}`, gen: 3},
	}
	for _, tc := range cases {
		f.repend(vpc)
		f.finish(f.claimOne("leaf").Result(json.RawMessage(tc.status)))
		require.JSONEq(t, tc.spec, scalar[string](f, `SELECT spec::text FROM resources WHERE id = $1`, subnet), tc.reason)
		s := f.state(subnet)
		require.Equal(t, tc.gen, s.Generation, tc.reason)
		if s.SyncedGen < s.Generation {
			q, ok := f.queued(subnet, TaskReconcile)
			require.True(t, ok, tc.reason)
			require.Equal(t, tc.gen, q.Generation, tc.reason)
			f.finish(f.claimOne("leaf").Result(json.RawMessage(`{}`)))
		}
	}
}

func TestCascade_FrozenDependentsAreNeitherSubstitutedNorScheduled(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	vpc := f.res("leaf", "vpc")
	flow := `[{"src_field":"/vpc_id","dep_field":"/vpc_id"}]`
	quarantined, orphaned := f.res("leaf", "q"), f.res("leaf", "o")
	f.edge(quarantined, vpc, flow)
	f.edge(orphaned, vpc, flow)
	f.set(quarantined, `frozen_until = 'infinity'`)
	f.set(orphaned, `frozen_until = now() + interval '1 hour'`)
	f.schedule(vpc)
	f.finish(f.claimOne("leaf").Result(json.RawMessage(`{"vpc_id":"v-1"}`)))

	for name, id := range map[string]uuid.UUID{"quarantined": quarantined, "orphaned": orphaned} {
		require.JSONEq(t, `{}`, scalar[string](f, `SELECT spec::text FROM resources WHERE id = $1`, id), name)
		require.EqualValues(t, 1, f.state(id).Generation, name)
		require.False(t, f.isQueued(id), name)
	}
}

// composite lays out a composed rollup root with n leaf children whose
// compose already ran, its own reconcile deferred to the rollup.
func (f *fx) composite(name string, n int) (uuid.UUID, []uuid.UUID) {
	f.t.Helper()
	root := f.res("comp", name)
	f.set(root, `composed_gen = generation`)
	var kids []uuid.UUID
	for i := range n {
		kids = append(kids, f.res("leaf", name+"-c"+string(rune('a'+i)), owner(root)))
	}
	f.schedule(kids...)
	return root, kids
}

func TestCascade_RollupRootPendsWhenItsLastChildSyncs(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)
	root, kids := f.composite("root", 3)
	require.False(t, f.isQueued(root))

	ts := f.claim("leaf", 10)
	require.Len(t, ts, 3)
	f.finish(ts[0].Result(nil), ts[1].Result(nil))
	require.False(t, f.isQueued(root), "one child still progressing")
	f.finish(ts[2].Result(nil))
	q, ok := f.queued(root, TaskReconcile)
	require.True(t, ok, "the last child synced: the rollup pends with no polling")
	require.Equal(t, "childrenSettled", q.Trigger)

	rollup := f.claimOne("comp")
	f.finish(rollup.Result(json.RawMessage(`{"children":3}`)))
	require.Equal(t, "Ready", f.phase(root))
	require.Equal(t, []string{"Normal RolledUp"}, f.events(root))
	for _, k := range kids {
		require.Equal(t, "Ready", f.phase(k))
	}
}

func TestCascade_RollupSurfacesAFailedChildAsDegradedAndRecovers(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)
	root, kids := f.composite("root", 2)
	ts := f.claim("leaf", 10)
	byID := map[uuid.UUID]Task{ts[0].Key.ResourceID: ts[0], ts[1].Key.ResourceID: ts[1]}
	f.finish(byID[kids[0]].Result(nil), byID[kids[1]].Failure("bad input", true))
	require.Equal(t, "Failed", f.phase(kids[1]))

	rollup := f.claimOne("comp")
	require.Equal(t, "childrenSettled", rollup.Trigger, "a failed child does not hold the rollup back")
	r := rollup.Result(json.RawMessage(`{"ready":1,"failed":1}`))
	r.HealthOK = healthy(false)
	r.Conditions = []Condition{{Type: "Ready", Status: "False", Reason: "ChildrenNotReady"}}
	f.finish(r)
	require.Equal(t, "Degraded", f.phase(root))

	f.set(kids[1], `spec = '{"fixed":true}'`)
	f.schedule(kids[1])
	require.False(t, f.isQueued(root))
	f.finish(f.claimOne("leaf").Result(nil))
	q, ok := f.queued(root, TaskReconcile)
	require.True(t, ok, "the child recovered: the synced root is re-pended")
	require.Equal(t, "childrenSettled", q.Trigger)
	rollup = f.claimOne("comp")
	r = rollup.Result(json.RawMessage(`{"ready":2}`))
	r.HealthOK = healthy(true)
	f.finish(r)
	require.Equal(t, "Ready", f.phase(root))
	_, ok = f.condition(root, "Ready")
	require.False(t, ok, "recovery clears the stored Ready=False")
	require.Equal(t, []string{"Warning RolledUp", "Normal RolledUp"}, f.events(root))
}

func TestCascade_HealthFlipRependsASyncedRoot(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)
	root, kids := f.composite("root", 2)
	f.runLeaves("leaf", func(Task) string { return `{}` })
	f.finish(f.claimOne("comp").Result(nil))
	require.Equal(t, "Ready", f.phase(root))

	f.repend(kids[0])
	r := f.claimOne("leaf").Result(nil)
	r.HealthOK = healthy(false)
	f.finish(r)
	require.Equal(t, "Degraded", f.phase(kids[0]))
	q, ok := f.queued(root, TaskReconcile)
	require.True(t, ok, "a descendant's health flipped false: the root re-pends to demote")
	require.Equal(t, "childrenSettled", q.Trigger)
}

func TestCascade_QuarantiningAProgressingChildUnblocksTheRollup(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)
	root, kids := f.composite("root", 2)
	ts := f.claim("leaf", 10)
	for _, task := range ts {
		if task.Key.ResourceID == kids[0] {
			f.finish(task.Result(nil))
		}
	}
	require.False(t, f.isQueued(root))
	f.set(kids[1], `frozen_until = 'infinity'`)
	require.True(t, f.isQueued(root), "the quarantined child left the gate: the rollup pends")
}

// degradedRollupRunning: root's two children settled, the second as a
// transient failure, and the root's rollup claimed (reading that picture)
// but not finished; the failed child's retry is due.
func degradedRollupRunning(t *testing.T) (*fx, uuid.UUID, []uuid.UUID, Task) {
	t.Helper()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)
	root, kids := f.composite("root", 2)
	ts := f.claim("leaf", 10)
	byID := map[uuid.UUID]Task{ts[0].Key.ResourceID: ts[0], ts[1].Key.ResourceID: ts[1]}
	f.finish(byID[kids[0]].Result(nil), byID[kids[1]].Failure("flaky", false))
	require.Equal(t, "Failed", f.phase(kids[1]))
	rollup := f.claimOne("comp")
	f.exec(`UPDATE work_queue SET not_before = now() - interval '1 minute' WHERE resource_id = $1`, kids[1])
	return f, root, kids, rollup
}

// staleDegraded is the running rollup's result: what it read.
func staleDegraded(rollup Task) Result {
	r := rollup.Result(json.RawMessage(`{"ready":1,"failed":1}`))
	r.HealthOK = healthy(false)
	return r
}

func TestCascade_AChildRecoveringWhileTheRollupRunsRollsTheRootUpAgain(t *testing.T) {
	t.Parallel()
	f, root, kids, rollup := degradedRollupRunning(t)
	f.finish(f.claimOne("leaf").Result(nil))
	require.Equal(t, "Ready", f.phase(kids[1]), "the child recovered while the root's rollup ran")

	f.finish(staleDegraded(rollup))
	require.Equal(t, "Degraded", f.phase(root), "the running rollup's picture applies")
	q, ok := f.queued(root, TaskReconcile)
	require.True(t, ok, "the subtree changed after the rollup read it: the root rolls up again")
	require.Equal(t, "childrenSettled", q.Trigger)
	r := f.claimOne("comp").Result(json.RawMessage(`{"ready":2}`))
	r.HealthOK = healthy(true)
	f.finish(r)
	require.Equal(t, "Ready", f.phase(root))
	require.False(t, f.isQueued(root), "once: the second rollup saw no change")
}

func TestCascade_ARerunRootStillWaitsForItsGate(t *testing.T) {
	t.Parallel()
	f, root, kids, rollup := degradedRollupRunning(t)
	f.finish(f.claimOne("leaf").Result(nil)) // marks the running rollup
	f.set(kids[0], `spec = '{"changed":true}'`)
	f.schedule(kids[0])

	f.finish(staleDegraded(rollup))
	require.False(t, f.isQueued(root), "a descendant is progressing: the gate holds the re-run back")
	f.finish(f.claimOne("leaf").Result(nil))
	q, ok := f.queued(root, TaskReconcile)
	require.True(t, ok, "the descendant settled: the root pends")
	require.Equal(t, "childrenSettled", q.Trigger)
}

func TestCascade_TheRerunMarkBelongsToOneLease(t *testing.T) {
	t.Parallel()
	f, root, _, rollup := degradedRollupRunning(t)
	f.finish(f.claimOne("leaf").Result(nil)) // marks the running rollup
	require.True(t, scalar[bool](f, `SELECT rerun FROM work_queue WHERE resource_id = $1`, root))
	n, err := f.st.Release(f.ctx, all, []TaskKey{rollup.Key})
	require.NoError(t, err)
	require.Equal(t, 1, n)

	again := f.claimOne("comp") // a new lease reads the subtree afresh
	require.False(t, scalar[bool](f, `SELECT rerun FROM work_queue WHERE resource_id = $1`, root), "the claim cleared the mark")
	r := again.Result(json.RawMessage(`{"ready":2}`))
	r.HealthOK = healthy(true)
	f.finish(r)
	require.Equal(t, "Ready", f.phase(root))
	require.False(t, f.isQueued(root), "no re-run for a change the new lease already saw")
}

func TestCascade_ATerminalFailureBlocksEveryTransitiveDependent(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	// a ← b ← c ← d ← e, d already synced
	a, b, c, d, e := f.res("leaf", "a"), f.res("leaf", "b"), f.res("leaf", "c"), f.res("leaf", "d"), f.res("leaf", "e")
	f.edge(b, a)
	f.edge(c, b)
	f.edge(d, c)
	f.edge(e, d)
	f.synced(d)

	f.set(a, `failure_gen = generation, failure_terminal = true`)

	require.Equal(t, "Failed", f.phase(a))
	for _, id := range []uuid.UUID{b, c} {
		require.Equal(t, "Failed", f.phase(id), "every progressing dependent down the chain is blocked")
		var terminal bool
		var reason string
		require.NoError(t, f.pool.QueryRow(f.ctx, `
SELECT r.failure_terminal, c.reason FROM resources r JOIN resource_conditions c ON c.resource_id = r.id AND c.type = 'Synced'
 WHERE r.id = $1`, id).Scan(&terminal, &reason))
		require.False(t, terminal, "blocked, not terminal: it reconciles once the upstream recovers")
		require.Equal(t, "DependencyFailed", reason)
	}
	require.Equal(t, "Ready", f.phase(d), "a synced dependent keeps its state")
	require.Equal(t, "Failed", f.phase(e), "the walk goes on through a synced dependent to the progressing ones below it")
}

// A refusal stands though the dependent's reconcile of the same generation
// was in flight: that reconcile ran on the spec the refusal keeps, and its
// success cleared the failure and the condition — whether its result drained
// with the refused value or after it — leaving the dependent Ready on the
// upstream's old value, with nothing to flow it again. Its result is now
// dropped (its queue row goes with the refusal, so a later result is fenced
// out), and so is a queued reconcile of that generation.
func TestCascade_ARefusalStandsThoughTheDependentsReconcileWasInFlight(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"SameBatch", "LaterBatch", "Queued"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			f := newFx(t)
			f.kind("leaf", reactWorker)
			f.kind("subnet", reactWorker,
				`"spec_schema": {"type":"object","properties":{"vpc_id":{"type":"string","pattern":"^v-"}}}`)
			vpc := f.res("leaf", "vpc")
			subnet := f.res("subnet", "subnet", spec(`{"cidr":"10.0.1.0/24"}`))
			f.edge(subnet, vpc, `[{"src_field":"/vpc_id","dep_field":"/vpc_id"}]`)
			f.schedule(vpc)
			f.finish(f.claimOne("leaf").Result(json.RawMessage(`{"vpc_id":"v-1"}`)))
			require.True(t, f.isQueued(subnet))
			var st Task
			if when != "Queued" {
				st = f.claimOne("subnet")
			}
			f.repend(vpc)
			vt := f.claimOne("leaf")
			switch when {
			case "SameBatch":
				f.finish(vt.Result(json.RawMessage(`{"vpc_id":7}`)), st.Result(json.RawMessage(`{}`)))
			case "LaterBatch":
				f.finish(vt.Result(json.RawMessage(`{"vpc_id":7}`)))
				f.finish(st.Result(json.RawMessage(`{}`)))
			case "Queued":
				f.finish(vt.Result(json.RawMessage(`{"vpc_id":7}`)))
				require.False(t, f.isQueued(subnet), "a terminal failure's queued reconcile goes")
			}
			require.Equal(t, "Failed", f.phase(subnet))
			c, ok := f.condition(subnet, "Synced")
			require.True(t, ok, "the refusal's condition stays")
			require.Equal(t, "ValueFlowRefused", c.Reason)
			require.JSONEq(t, `{"cidr":"10.0.1.0/24","vpc_id":"v-1"}`,
				scalar[string](f, `SELECT spec::text FROM resources WHERE id = $1`, subnet))
			require.Equal(t, "Ready", f.phase(vpc))

			// A valid value flows and clears the failure, as before.
			f.repend(vpc)
			f.finish(f.claimOne("leaf").Result(json.RawMessage(`{"vpc_id":"v-2"}`)))
			f.finish(f.claimOne("subnet").Result(json.RawMessage(`{}`)))
			require.Equal(t, "Ready", f.phase(subnet))
			_, ok = f.condition(subnet, "Synced")
			require.False(t, ok, "a clean reconcile clears the refusal's condition")
		})
	}
}

// TestCascade_AFlowedValueTheSchemaRefusesFailsTheDependent: a value flow
// whose value the dependent kind's spec_schema refuses is not written: the
// dependent keeps its spec and fails, terminally, for its generation, with
// a Synced condition naming the flow and the violation, and is not
// scheduled; the rest of the batch drains. A later valid value flows and
// clears the failure (a new generation). The drain substituted it blindly,
// writing a spec the API would have refused and handing it to the worker.
func TestCascade_AFlowedValueTheSchemaRefusesFailsTheDependent(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("subnet", reactWorker,
		`"spec_schema": {"type":"object","properties":{"vpc_id":{"type":"string","pattern":"^v-"}}}`)
	vpc, other := f.res("leaf", "vpc"), f.res("leaf", "other")
	subnet := f.res("subnet", "subnet", spec(`{"cidr":"10.0.1.0/24"}`))
	fine := f.res("subnet", "fine")
	f.edge(subnet, vpc, `[{"src_field":"/vpc_id","dep_field":"/vpc_id"}]`)
	f.edge(fine, other, `[{"src_field":"/vpc_id","dep_field":"/vpc_id"}]`)
	f.schedule(vpc, other)

	ts := f.claim("leaf", 2)
	require.Len(t, ts, 2)
	status := map[uuid.UUID]string{vpc: `{"vpc_id":7}`, other: `{"vpc_id":"v-2"}`}
	f.finish(ts[0].Result(json.RawMessage(status[ts[0].Key.ResourceID])), ts[1].Result(json.RawMessage(status[ts[1].Key.ResourceID])))

	require.JSONEq(t, `{"cidr":"10.0.1.0/24"}`, scalar[string](f, `SELECT spec::text FROM resources WHERE id = $1`, subnet),
		"the refused value is not written")
	require.EqualValues(t, 1, f.state(subnet).Generation)
	require.Equal(t, "Failed", f.phase(subnet))
	require.False(t, f.isQueued(subnet), "a terminal failure is not scheduled")
	c, ok := f.condition(subnet, "Synced")
	require.True(t, ok)
	require.Equal(t, "ValueFlowRefused", c.Reason)
	require.Equal(t, `value flow leaf/vpc /vpc_id → /vpc_id: spec/vpc_id: expected string, but got number [type]`, c.Message)
	require.Contains(t, f.events(subnet), "Warning ValueFlowRefused")
	require.Equal(t, "Ready", f.phase(vpc), "the upstream's own result applied")
	require.JSONEq(t, `{"vpc_id":"v-2"}`, scalar[string](f, `SELECT spec::text FROM resources WHERE id = $1`, fine),
		"the batch's valid flow is written")
	require.True(t, f.isQueued(fine))

	// A valid value flows and clears the failure: a new generation.
	f.repend(vpc)
	f.finish(f.claimOne("leaf").Result(json.RawMessage(`{"vpc_id":"v-1"}`)))
	require.JSONEq(t, `{"cidr":"10.0.1.0/24","vpc_id":"v-1"}`, scalar[string](f, `SELECT spec::text FROM resources WHERE id = $1`, subnet))
	require.EqualValues(t, 2, f.state(subnet).Generation)
	require.True(t, f.isQueued(subnet))
}
