package pipeline

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store"
)

// One test per gate explain_resource names: build the situation with the
// real scheduler, claim and drain, check the explanation, then do what the
// explanation says releases it and check the pipeline moves (and the
// explanation with it).

// why returns the gates holding id, first the holding one.
func (f *fx) why(id uuid.UUID) []store.Wait {
	f.t.Helper()
	ws, err := store.New(f.pool, nil).Explain(f.ctx, id, 0)
	require.NoError(f.t, err)
	return ws
}

// gates lists the gate names of why(id).
func (f *fx) gates(id uuid.UUID) []store.WaitGate {
	f.t.Helper()
	var out []store.WaitGate
	for _, w := range f.why(id) {
		out = append(out, w.Gate)
	}
	return out
}

// broker registers a live broker reporting ready workers for kinds.
func (f *fx) broker(id string, kinds ...string) {
	f.t.Helper()
	f.exec(`INSERT INTO cluster_members (member_id, role, kinds, last_heartbeat) VALUES ($1, 'broker', $2, now())`, id, kinds)
}

func TestExplain_Upstream(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	up := f.res("leaf", "up")
	dep := f.res("leaf", "dep")
	f.edge(dep, up)
	require.Zero(t, f.schedule(dep), "the scheduler holds it")
	ws := f.why(dep)
	require.Len(t, ws, 1)
	require.Equal(t, store.GateUpstream, ws[0].Gate)
	require.Equal(t, []uuid.UUID{up}, ws[0].Blockers)
	require.Equal(t, 1, ws[0].BlockerCount)

	f.synced(up) // what releases it: the upstream syncs (its cascade schedules the dependent)
	f.schedule(dep)
	require.True(t, f.isQueued(dep))
	require.Equal(t, []store.WaitGate{store.GateNoWorker, store.GateQueued}, f.gates(dep))
}

func TestExplain_Descendants(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("comp", reactComposite)
	f.kind("leaf", reactWorker)
	root := f.res("comp", "root")
	f.set(root, `composed_gen = generation`)
	a := f.res("leaf", "a", owner(root))
	b := f.res("leaf", "b", owner(root))
	f.synced(a)
	require.Zero(t, f.schedule(root))
	ws := f.why(root)
	require.Len(t, ws, 1)
	require.Equal(t, store.GateDescendants, ws[0].Gate)
	require.Equal(t, []uuid.UUID{b}, ws[0].Blockers, "only the unsettled descendant is named")

	f.synced(b) // its last descendant settles (its cascade pends the root)
	f.schedule(root)
	require.True(t, f.isQueued(root))
	require.Equal(t, store.GateQueued, f.gates(root)[len(f.gates(root))-1])
}

func TestExplain_Composing(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("comp", reactComposite)
	f.broker("b1", "comp/v1")
	root := f.res("comp", "root")
	require.Equal(t, 1, f.schedule(root))
	require.Equal(t, []store.WaitGate{store.GateComposing, store.GateQueued}, f.gates(root))

	task := f.claimOne("comp")
	_, err := f.st.ApplyCompose(f.ctx, task, Composition{})
	require.NoError(t, err)
	require.NotContains(t, f.gates(root), store.GateComposing, "the composer expanded the generation")
}

func TestExplain_QueuedClaimedThenDone(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.broker("b1", "leaf/v1")
	id := f.res("leaf", "x")
	require.Equal(t, 1, f.schedule(id))
	ws := f.why(id)
	require.Equal(t, []store.WaitGate{store.GateQueued}, f.gates(id))
	require.NotNil(t, ws[0].Since)

	task := f.claimOne("leaf") // a claim releases a queued task
	ws = f.why(id)
	require.Len(t, ws, 1)
	require.Equal(t, store.GateClaimed, ws[0].Gate)
	require.Equal(t, all.WorkerID, ws[0].BrokerID)

	f.finish(task.Result([]byte(`{}`))) // the result lands: nothing holds it
	require.Empty(t, f.why(id))
	require.Equal(t, "Ready", f.phase(id))
}

func TestExplain_NoWorker(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "x")
	require.Equal(t, 1, f.schedule(id))
	f.broker("b-other", "other/v1")
	require.Equal(t, []store.WaitGate{store.GateNoWorker, store.GateQueued}, f.gates(id))
	f.exec(`UPDATE cluster_members SET last_heartbeat = now() - interval '1 hour'`)
	f.broker("b-stale", "leaf/v1")
	f.exec(`UPDATE cluster_members SET last_heartbeat = now() - interval '1 hour' WHERE member_id = 'b-stale'`)
	require.Contains(t, f.gates(id), store.GateNoWorker, "a broker past the liveness window does not count")

	f.broker("b1", "leaf/v1") // a live broker with a ready worker for the kind
	require.Equal(t, []store.WaitGate{store.GateQueued}, f.gates(id))
}

func TestExplain_KindCap(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("capped", reactWorker, `"max_inflight": 1`)
	f.broker("b1", "capped/v1")
	a := f.res("capped", "a")
	b := f.res("capped", "b")
	require.Equal(t, 2, f.schedule(a, b))
	first := f.claimOne("capped")
	other := a
	if first.Key.ResourceID == a {
		other = b
	}
	ws := f.why(other)
	require.Equal(t, []store.WaitGate{store.GateKindCap, store.GateQueued}, f.gates(other))
	require.Equal(t, 1, *ws[0].InFlight)
	require.Equal(t, 1, *ws[0].Cap)
	require.Empty(t, f.claim("capped", 10), "the claim agrees: the cap is full")

	f.finish(first.Result([]byte(`{}`))) // the slot is given back
	require.Equal(t, []store.WaitGate{store.GateQueued}, f.gates(other))
	require.Len(t, f.claim("capped", 10), 1)
}

func TestExplain_Backoff(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.broker("b1", "leaf/v1")
	id := f.res("leaf", "x")
	f.schedule(id)
	task := f.claimOne("leaf")
	f.finish(task.Failure("boom", false))
	ws := f.why(id)
	require.Len(t, ws, 1)
	require.Equal(t, store.GateBackoff, ws[0].Gate)
	require.NotNil(t, ws[0].Until)
	require.Empty(t, f.claim("leaf", 10), "the claim agrees: not before the backoff ends")

	at := *ws[0].Until // the backoff ends
	f.st.Clock = func() time.Time { return at.Add(time.Millisecond) }
	require.Len(t, f.claim("leaf", 10), 1)
}

func TestExplain_FailedTerminal(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "x")
	f.schedule(id)
	f.finish(f.claimOne("leaf").Failure("bad spec", true))
	require.Equal(t, []store.WaitGate{store.GateFailedTerminal}, f.gates(id))
	require.Zero(t, f.schedule(id))

	f.exec(`UPDATE resources SET spec = '{"fixed":true}' WHERE id = $1`, id) // a spec change
	require.Equal(t, 1, f.schedule(id))
	require.NotContains(t, f.gates(id), store.GateFailedTerminal)
}

func TestExplain_FailedRetryAndNotQueued(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.broker("b1", "leaf/v1")
	failed := f.res("leaf", "failed")
	f.set(failed, `failure_gen = generation, updated_at = now() - interval '1 hour'`)
	lost := f.res("leaf", "lost") // lagging, its queue row lost (the queue is UNLOGGED)
	f.set(lost, `updated_at = now() - interval '1 hour'`)
	require.Equal(t, []store.WaitGate{store.GateFailedRetry}, f.gates(failed))
	require.Equal(t, []store.WaitGate{store.GateNotQueued}, f.gates(lost))

	var n int // the reaper's pass re-pends both
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT requeue_failed_and_pending(0, 255, 100, interval '1 second', now() + interval '1 minute')`).Scan(&n))
	require.Equal(t, 2, n)
	for _, id := range []uuid.UUID{failed, lost} {
		require.True(t, f.isQueued(id))
		// queued at the pass's clock (a minute ahead): not before then
		require.Equal(t, []store.WaitGate{store.GateBackoff}, f.gates(id))
	}
}

// A failed resource with no task is retried by the reaper (failed_retry)
// when nothing else holds it, whether it failed reconciling its spec or
// resyncing a synced one: what else may hold it differs. A lagging row's
// retry goes through the scheduler's gates, so an upstream holds it
// instead, and a missing config is named after the retry; a synced row's
// retry (its resync's task lost) is held by a missing config alone, named
// in its place, never by an upstream (it is not lagging its spec).
func TestExplain_FailedRetryNamesWhatElseHoldsIt(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		synced bool
		upstr  bool // an upstream lags its spec
		gone   bool // its providerConfigRef names no config
		want   []store.WaitGate
	}{
		"Lagging": {
			reason: "a failed reconcile with its task gone: the reaper's retry",
			want:   []store.WaitGate{store.GateFailedRetry},
		},
		"LaggingBehindAnUpstream": {
			reason: "the upstream holds it, not the retry window",
			upstr:  true,
			want:   []store.WaitGate{store.GateUpstream},
		},
		"LaggingWithItsConfigGone": {
			reason: "the retry, then the missing config that will hold it",
			gone:   true,
			want:   []store.WaitGate{store.GateFailedRetry, store.GateProviderConfigMissing},
		},
		"Synced": {
			reason: "a failed resync whose task was lost: the reaper's retry",
			synced: true,
			want:   []store.WaitGate{store.GateFailedRetry},
		},
		"SyncedBehindAnUpstream": {
			reason: "a synced row lags no spec: its upstream does not hold its retry",
			synced: true,
			upstr:  true,
			want:   []store.WaitGate{store.GateFailedRetry},
		},
		"SyncedWithItsConfigGone": {
			reason: "the missing config holds its resyncs, in place of the retry",
			synced: true,
			gone:   true,
			want:   []store.WaitGate{store.GateProviderConfigMissing},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFx(t)
			f.kind("leaf", reactWorker)
			f.broker("b1", "leaf/v1")
			id := f.res("leaf", "x")
			if tc.upstr {
				f.edge(id, f.res("leaf", "up"))
			}
			if tc.synced {
				f.synced(id)
			}
			f.set(id, `failure_gen = generation, updated_at = now() - interval '1 hour'`)
			if tc.gone {
				f.dangle(id, "leaf", "gone")
			}
			require.False(t, f.isQueued(id), "no task")
			require.Equal(t, tc.want, f.gates(id), tc.reason)
		})
	}
}

func TestExplain_QuarantinedAndOrphaned(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	q := f.res("leaf", "q")
	o := f.res("leaf", "o")
	f.exec(`SELECT quarantine_resource($1)`, q)
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	f.set(o, `frozen_until = $2`, until)
	require.Zero(t, f.schedule(q, o))
	require.Equal(t, []store.WaitGate{store.GateQuarantined}, f.gates(q))
	ws := f.why(o)
	require.Equal(t, store.GateOrphaned, ws[0].Gate)
	require.True(t, until.Equal(*ws[0].Until))

	f.exec(`SELECT unquarantine_resource($1)`, q) // lifting the quarantine re-arms it
	require.True(t, f.isQueued(q))
	var n int // the grace ends: the orphan sweep deletes it
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT sweep_expired_orphans(0, 255, 100, $1)`, until.Add(time.Second)).Scan(&n))
	require.Equal(t, 1, scalar[int](f, `SELECT count(*) FROM resources WHERE id = $1 AND deletion_requested_at IS NOT NULL`, o)+
		scalar[int](f, `SELECT 1 - count(*) FROM resources WHERE id = $1`, o))
}

func TestExplain_DeletingBlockedThenTeardown(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("fin", reactFinalizer)
	f.kind("leaf", reactWorker)
	parent := f.res("fin", "parent")
	f.set(parent, `finalizers = '{test/teardown}'`)
	child := f.res("leaf", "child", owner(parent))
	dependent := f.res("leaf", "dependent")
	f.edge(dependent, parent)
	f.set(parent, `deletion_requested_at = now()`)
	ws := f.why(parent)
	require.Equal(t, []store.WaitGate{store.GateDeletingChildren, store.GateDeletingDependents}, f.gates(parent))
	require.Equal(t, []uuid.UUID{child}, ws[0].Blockers)
	require.Equal(t, []uuid.UUID{dependent}, ws[1].Blockers)
	sweep := func() int {
		var n int
		require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT sweep_deletable(0, 255, 100)`).Scan(&n))
		return n
	}
	require.Zero(t, sweep(), "the sweep agrees: strict wait")

	f.exec(`DELETE FROM resources WHERE id = ANY ($1)`, []uuid.UUID{child, dependent}) // the blockers go
	require.Equal(t, []store.WaitGate{store.GateDeletingSweep}, f.gates(parent))
	require.Equal(t, 1, sweep(), "the sweep queues its teardown")
	require.Equal(t, []store.WaitGate{store.GateDeletingTeardown, store.GateNoWorker, store.GateQueued}, f.gates(parent))
}

// A lease whose broker is no longer live is not released by a result that
// will not come: why says the broker is gone and that the reaper frees the
// lease, which it then does.
func TestExplain_ClaimedByABrokerNoLongerLive(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.broker(all.WorkerID, "leaf/v1") // the claimer, live
	id := f.res("leaf", "x")
	require.Equal(t, 1, f.schedule(id))
	f.claimOne("leaf")
	ws := f.why(id)
	require.Equal(t, store.GateClaimed, ws[0].Gate)
	require.NotContains(t, ws[0].Message, "no longer live", "a live broker holds it")

	f.exec(`UPDATE cluster_members SET last_heartbeat = now() - interval '1 hour' WHERE member_id = $1`, all.WorkerID)
	ws = f.why(id)
	require.Len(t, ws, 1)
	require.Equal(t, store.GateClaimed, ws[0].Gate)
	require.Equal(t, all.WorkerID, ws[0].BrokerID)
	require.Contains(t, ws[0].Message, "broker w-all, which is no longer live")
	require.Contains(t, ws[0].Message, "the reaper frees its lease and queues it again")

	// what releases it: the reaper's stale-lease pass
	var n int
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT reap_stale_work(0, 255, interval '1 second', now() + interval '1 minute')`).Scan(&n))
	require.Equal(t, 1, n)
	require.NotContains(t, f.gates(id), store.GateClaimed)
}

// A task backing off is held by its backoff now, and, when no live broker
// serves its kind, by that next: why names both, not just the first.
func TestExplain_BackoffWithNoWorker(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "x")
	f.schedule(id)
	f.finish(f.claimOne("leaf").Failure("boom", false))
	require.Equal(t, []store.WaitGate{store.GateBackoff, store.GateNoWorker}, f.gates(id))

	f.broker("b1", "leaf/v1") // a worker serving the kind connects: only the backoff is left
	require.Equal(t, []store.WaitGate{store.GateBackoff}, f.gates(id))
}

// dangle makes id name providerconfig kind/name and then deletes the config
// under it: a ref left dangling before the API and the keep-named trigger
// refused that (nothing new can make one).
func (f *fx) dangle(id uuid.UUID, kind, name string) {
	f.t.Helper()
	f.exec(`INSERT INTO providerconfigs (kind, name, spec) VALUES ($1, $2, '{}')`, kind, name)
	f.set(id, `provider_config_ref = $2`, name)
	f.exec(`DELETE FROM providerconfigs WHERE kind = $1 AND name = $2`, kind, name)
}

// A resource whose providerConfigRef names a config that does not exist is
// held by every path that would queue it a task (hold_config_missing): why
// names the config and what releases it — after the gates that hold it
// first, and instead of the not_queued or delete-sweep answers, whose
// backstops queue it nothing.
func TestExplain_ProviderConfigMissing(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("fin", reactFinalizer)
	f.broker("b1", "leaf/v1", "fin/v1")

	held := f.res("leaf", "held")
	f.dangle(held, "leaf", "gone")
	require.Zero(t, f.schedule(held), "the gate holds it")
	ws := f.why(held)
	require.Len(t, ws, 1, "%+v", ws)
	require.Equal(t, store.GateProviderConfigMissing, ws[0].Gate)
	require.Contains(t, ws[0].Message, "providerconfig leaf/gone")
	require.Contains(t, ws[0].Message, "until a config of that name is applied")
	require.NotNil(t, ws[0].Since, "since the hold recorded its condition")

	// Behind an upstream, it is named after the gate holding it first.
	up := f.res("leaf", "up")
	dep := f.res("leaf", "dep")
	f.edge(dep, up)
	f.dangle(dep, "leaf", "gone-too")
	require.Equal(t, []store.WaitGate{store.GateUpstream, store.GateProviderConfigMissing}, f.gates(dep))

	// A teardown is held the same way: not the delete sweep's to queue.
	tear := f.res("fin", "tear")
	f.set(tear, `finalizers = '{test/teardown}'`)
	f.dangle(tear, "fin", "gone")
	f.exec(`SELECT request_resource_deletion($1)`, tear)
	_, queued := f.queued(tear, TaskDelete)
	require.False(t, queued, "no teardown with the kind's default config")
	ws = f.why(tear)
	require.Len(t, ws, 1, "%+v", ws)
	require.Equal(t, store.GateProviderConfigMissing, ws[0].Gate)
	require.Contains(t, ws[0].Message, "providerconfig fin/gone")
	require.Contains(t, ws[0].Message, "teardown")

	// Synced, its resyncs are held all the same.
	synced := f.res("leaf", "synced")
	f.synced(synced)
	f.dangle(synced, "leaf", "gone")
	require.Equal(t, []store.WaitGate{store.GateProviderConfigMissing}, f.gates(synced))

	// What releases it: a config of that name applied.
	f.exec(`INSERT INTO providerconfigs (kind, name, spec) VALUES ('leaf', 'gone', '{}')`)
	require.Empty(t, f.gates(synced))
	require.Equal(t, 1, f.schedule(held))
	require.Equal(t, []store.WaitGate{store.GateQueued}, f.gates(held))
}

// A dependent failed by its upstream's terminal failure (DependencyFailed:
// failed for its live spec, not terminally) is held by that upstream, not by
// a retry window: the reaper's retry goes through the gate, which holds it
// on the upstream again, and what releases it is the upstream syncing (its
// cascade schedules the dependent at once). why names the upstream alone.
func TestExplain_DependencyFailedWaitsForItsUpstreamNotARetry(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.broker("b1", "leaf/v1")
	up := f.res("leaf", "up")
	dep := f.res("leaf", "dep")
	f.edge(dep, up)
	require.Equal(t, 1, f.schedule(up, dep))
	f.finish(f.claimOne("leaf").Failure("bad spec", true))
	require.Equal(t, "Failed", f.phase(dep), "its upstream's terminal failure fails it")
	ws := f.why(dep)
	require.Equal(t, []store.WaitGate{store.GateUpstream}, f.gates(dep), "%+v", ws)
	require.Equal(t, []uuid.UUID{up}, ws[0].Blockers)

	var n int // the reaper's retry queues it nothing: the upstream holds it
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT requeue_failed_and_pending(0, 255, 100, interval '1 second', now() + interval '1 minute')`).Scan(&n))
	require.Zero(t, n)
	require.False(t, f.isQueued(dep))

	f.exec(`UPDATE resources SET spec = '{"fixed":true}' WHERE id = $1`, up) // what releases it: the upstream fixed
	require.Equal(t, 1, f.schedule(up))
	f.finish(f.claimOne("leaf").Result([]byte(`{}`)))
	require.True(t, f.isQueued(dep), "the upstream's sync schedules it")
}

// A synced resource whose resync failed (retryably) is Failed for its live
// spec and its resync task backs off: why names the task's claim state, as
// for any failed reconcile, not "nothing holds it".
func TestExplain_AFailedResyncBacksOff(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.broker("b1", "leaf/v1")
	id := f.res("leaf", "x")
	f.schedule(id)
	f.finish(f.claimOne("leaf").Result([]byte(`{}`)))
	require.Equal(t, "Ready", f.phase(id))
	require.Equal(t, 1, scalar[int](f, `SELECT resync_enqueue(ARRAY[$1::uuid], false, now())`, id))
	f.finish(f.claimOne("leaf").Failure("drifted and could not fix it", false))
	require.Equal(t, "Failed", f.phase(id))
	ws := f.why(id)
	require.Equal(t, []store.WaitGate{store.GateBackoff}, f.gates(id), "%+v", ws)
	require.NotNil(t, ws[0].Until)

	at := *ws[0].Until // the backoff ends: the retry is claimed
	f.st.Clock = func() time.Time { return at.Add(time.Millisecond) }
	require.Len(t, f.claim("leaf", 10), 1)
	require.Equal(t, store.GateClaimed, f.gates(id)[0])
}

// An orphan whose grace has ended is no longer deleted "when the grace
// ends": it waits for the reaper's orphan sweep, and why says so.
func TestExplain_AnOrphanPastItsGraceWaitsForTheSweep(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	o := f.res("leaf", "o")
	ended := time.Now().Add(-time.Minute).UTC().Truncate(time.Second)
	f.set(o, `frozen_until = $2`, ended)
	ws := f.why(o)
	require.Len(t, ws, 1)
	require.Equal(t, store.GateOrphaned, ws[0].Gate)
	require.True(t, ended.Equal(*ws[0].Until))
	require.Contains(t, ws[0].Message, "its grace ended")
	require.Contains(t, ws[0].Message, "the reaper's orphan sweep starts its delete on its next pass")

	var n int // what releases it: the orphan sweep
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT sweep_expired_orphans(0, 255, 100)`).Scan(&n))
	require.Equal(t, 1, n)
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM resources WHERE id = $1`, o), "a leaf without a finalizer goes at once")
}
