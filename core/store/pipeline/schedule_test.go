package pipeline

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

func TestScheduleEligible_GatesEachCandidate(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.noCascade()
	f.kind("leaf", reactWorker)

	cases := map[string]struct {
		reason string
		setup  func(id uuid.UUID)
		want   bool
	}{
		"lagging": {
			reason: "generation > synced_gen needs reconciling",
			setup:  func(uuid.UUID) {},
			want:   true,
		},
		"synced": {
			reason: "a resource at synced_gen = generation has nothing to do",
			setup:  func(id uuid.UUID) { f.synced(id) },
			want:   false,
		},
		"deleting": {
			reason: "a resource being deleted is torn down, not reconciled",
			setup:  func(id uuid.UUID) { f.set(id, `deletion_requested_at = now()`) },
			want:   false,
		},
		"orphaned": {
			reason: "a finite frozen_until (orphan grace) freezes the row",
			setup:  func(id uuid.UUID) { f.set(id, `frozen_until = now() + interval '1 hour'`) },
			want:   false,
		},
		"quarantined": {
			reason: "frozen_until = infinity (quarantine) freezes the row",
			setup:  func(id uuid.UUID) { f.set(id, `frozen_until = 'infinity'`) },
			want:   false,
		},
		"terminally failed": {
			reason: "a terminal failure for the live spec stops retries",
			setup:  func(id uuid.UUID) { f.set(id, `failure_gen = generation, failure_terminal = true`) },
			want:   false,
		},
		"transiently failed": {
			reason: "a transient failure is retried",
			setup:  func(id uuid.UUID) { f.set(id, `failure_gen = generation, failure_terminal = false`) },
			want:   true,
		},
		"terminal failure of an older spec": {
			reason: "a spec bump self-invalidates the stale terminal failure",
			setup: func(id uuid.UUID) {
				f.set(id, `failure_gen = 1, failure_terminal = true`)
				f.set(id, `spec = '{"v":2}'`)
			},
			want: true,
		},
	}
	for name, tc := range cases {
		id := f.res("leaf", "r-"+uuid.NewString()[:8])
		tc.setup(id)
		f.schedule(id)
		require.Equal(t, tc.want, f.isQueued(id), "%s: %s", name, tc.reason)
	}
}

func TestScheduleEligible_WaitsForEveryUpstream(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.noCascade()
	f.kind("leaf", reactWorker)
	a, b := f.res("leaf", "a"), f.res("leaf", "b")
	app := f.res("leaf", "app")
	f.edge(app, a)
	f.edge(app, b)

	require.Zero(t, f.schedule(app), "no upstream synced")
	f.synced(a)
	require.Zero(t, f.schedule(app), "one of two upstreams synced")
	require.False(t, f.isQueued(app))
	f.synced(b)
	require.Equal(t, 1, f.schedule(app), "every upstream caught up")
	q, ok := f.queued(app, TaskReconcile)
	require.True(t, ok)
	require.Equal(t, "specChange", q.Trigger)
}

func TestScheduleEligible_RollupWaitsForProgressingDescendantsOnly(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.noCascade()
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)

	cases := map[string]struct {
		reason  string
		child   func(id uuid.UUID)
		want    bool
		trigger string
	}{
		"progressing": {
			reason: "a child still reconciling holds the rollup back",
			child:  func(uuid.UUID) {},
			want:   false,
		},
		"synced": {
			reason:  "every child synced: the rollup runs",
			child:   func(id uuid.UUID) { f.synced(id) },
			want:    true,
			trigger: "childrenSettled",
		},
		"failed": {
			reason:  "a failed child is settled: the rollup runs and reports it",
			child:   func(id uuid.UUID) { f.set(id, `failure_gen = generation`) },
			want:    true,
			trigger: "childrenSettled",
		},
		"quarantined": {
			reason:  "a quarantined child is excluded from the gate",
			child:   func(id uuid.UUID) { f.set(id, `frozen_until = 'infinity'`) },
			want:    true,
			trigger: "childrenSettled",
		},
		"orphaned": {
			reason:  "an orphaned child is excluded from the gate",
			child:   func(id uuid.UUID) { f.set(id, `frozen_until = now() + interval '1 minute'`) },
			want:    true,
			trigger: "childrenSettled",
		},
		"deleting": {
			reason:  "a deleting child is excluded from the gate",
			child:   func(id uuid.UUID) { f.set(id, `deletion_requested_at = now()`) },
			want:    true,
			trigger: "childrenSettled",
		},
	}
	for name, tc := range cases {
		root := f.res("comp", "root-"+uuid.NewString()[:8])
		f.set(root, `composed_gen = generation`)
		done := f.res("leaf", "done-"+uuid.NewString()[:8], owner(root))
		f.synced(done)
		child := f.res("leaf", "c-"+uuid.NewString()[:8], owner(root))
		tc.child(child)
		f.schedule(root)
		q, ok := f.queued(root, TaskReconcile)
		require.Equal(t, tc.want, ok, "%s: %s", name, tc.reason)
		if ok {
			require.Equal(t, tc.trigger, q.Trigger, name)
		}
	}
}

func TestScheduleEligible_ComposesBeforeWaitingOnChildren(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.noCascade()
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)
	root := f.res("comp", "root")
	f.res("leaf", "child", owner(root))

	require.Equal(t, 1, f.schedule(root), "composed_gen < generation: the composer runs first")
	q, _ := f.queued(root, TaskReconcile)
	require.Equal(t, "specChange", q.Trigger)
}

func TestScheduleEligible_NestedCompositeWalksItsSubtree(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.noCascade()
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)
	top := f.res("comp", "top")
	mid := f.res("comp", "mid", owner(top))
	f.set(mid, `composed_gen = generation`)
	sub := f.res("comp", "sub", owner(mid))
	f.synced(sub)
	leaf := f.res("leaf", "leaf", owner(sub))
	other := f.res("leaf", "other", owner(top))

	require.Zero(t, f.schedule(mid), "a grandchild still progressing holds the nested rollup")
	f.synced(leaf)
	require.Equal(t, 1, f.schedule(mid), "the nested subtree settled; a sibling outside it does not count")
	require.False(t, f.isQueued(other))
}

func TestScheduleEligible_SnapshotsTheAttachedProviderConfig(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.noCascade()
	f.kind("leaf", reactWorker)
	f.exec(`INSERT INTO providerconfigs (kind, name, spec, data) VALUES ('leaf', 'custom', '{"region":"eu"}', '{"blob":1}')`)
	id := f.res("leaf", "a", configRef("custom"))
	plain := f.res("leaf", "b")
	f.schedule(id, plain)

	q, _ := f.queued(id, TaskReconcile)
	require.JSONEq(t, `{"region":"eu"}`, string(q.Config))
	require.JSONEq(t, `{"blob":1}`, string(q.Bundle))
	q, _ = f.queued(plain, TaskReconcile)
	require.Nil(t, q.Config, "no ref: the worker uses the kind's default")
}

func TestScheduleEligible_HoldsAResourceWhoseConfigIsMissing(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.noCascade()
	f.kind("leaf", reactWorker)
	f.exec(`INSERT INTO providerconfigs (kind, name, spec) VALUES ('leaf', 'custom', '{"region":"eu"}')`)
	id := f.res("leaf", "a", configRef("custom"))
	// A ref left dangling (a config deleted under it before the API and the
	// keep-named trigger refused that): nothing new can make one.
	f.exec(`DELETE FROM providerconfigs WHERE kind = 'leaf' AND name = 'custom'`)

	require.Zero(t, f.schedule(id), "a dangling ref is not reconciled with the kind's default config")
	require.False(t, f.isQueued(id))
	c, ok := f.condition(id, "Synced")
	require.True(t, ok, "the resource says why it waits")
	require.Equal(t, "False", c.Status)
	require.Equal(t, "ProviderConfigNotFound", c.Reason)
	require.Contains(t, c.Message, "leaf/custom")
	ltt := c.LTT
	require.Zero(t, f.schedule(id))
	c, _ = f.condition(id, "Synced")
	require.Equal(t, ltt, c.LTT, "a condition is written on transition only")
	// Held already, it is not locked again: a retry never waits on another
	// transaction holding the condition (a drain's cascade holding it too).
	tx, err := f.pool.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(f.ctx) }()
	_, err = tx.Exec(f.ctx, `SELECT 1 FROM resource_conditions WHERE resource_id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	conn, err := f.pool.Acquire(f.ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(f.ctx, `SET lock_timeout = '5s'`)
	require.NoError(t, err)
	var n int
	require.NoError(t, conn.QueryRow(f.ctx, `SELECT schedule_eligible(ARRAY[$1::uuid], now())`, id).Scan(&n),
		"a held resource's retry takes no lock on its unchanged condition")
	_, err = conn.Exec(f.ctx, `RESET lock_timeout`)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(f.ctx))

	f.exec(`INSERT INTO providerconfigs (kind, name, spec) VALUES ('leaf', 'custom', '{"region":"us"}')`)
	require.Equal(t, 1, f.schedule(id), "the config applied again: the resource is reconciled with it")
	q, _ := f.queued(id, TaskReconcile)
	require.JSONEq(t, `{"region":"us"}`, string(q.Config))
}

// The dangling-ref check costs a candidate without a ref nothing: the
// config probe sits under a one-time filter on the ref.
func TestScheduleEligible_ProbesNoConfigForACandidateWithoutARef(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.noCascade()
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	conn, plans := explainedConn(f)
	_, err := conn.Exec(f.ctx, `SET auto_explain.log_analyze = on`)
	require.NoError(t, err)
	_, err = conn.Exec(f.ctx, `SELECT schedule_eligible(ARRAY[$1::uuid], now())`, id)
	require.NoError(t, err)

	var probes []string
	for _, p := range *plans {
		for _, line := range strings.Split(p, "\n") {
			if strings.Contains(line, " on providerconfigs ") {
				probes = append(probes, strings.TrimSpace(line))
			}
		}
	}
	require.NotEmpty(t, probes, "the gate's plan reads providerconfigs by key")
	for _, line := range probes {
		require.Contains(t, line, "(never executed)", "a candidate without a ref probes no config")
	}
}

func TestScheduleEligible_IsGenGatedAndIdempotent(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.noCascade()
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")

	require.Equal(t, 1, f.schedule(id))
	require.Zero(t, f.schedule(id), "re-running changes nothing")

	f.set(id, `spec = '{"v":2}'`)
	require.Equal(t, 1, f.schedule(id), "a newer generation raises the unleased row")
	q, _ := f.queued(id, TaskReconcile)
	require.EqualValues(t, 2, q.Generation)

	f.exec(`UPDATE work_queue SET worker_id = 'w', claim_epoch = 7 WHERE resource_id = $1`, id)
	f.set(id, `spec = '{"v":3}'`)
	require.Zero(t, f.schedule(id), "a leased row is never touched")
	q, _ = f.queued(id, TaskReconcile)
	require.EqualValues(t, 2, q.Generation)
	require.True(t, q.Leased)
}
