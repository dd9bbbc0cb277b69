package pipeline

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// These tests pin a Postgres subtlety the queue statements must survive: a
// statement that locks a row FOR UPDATE after another transaction updated
// it (and committed once the statement's snapshot was taken) gets the
// row's NEW version, whose TID its own snapshot cannot see — so a
// delete or update by that TID in the same statement silently touches
// nothing. A heartbeat committing while the drain waits on the queue row
// left a finished task leased for the whole lease timeout (the benchmark's
// 40–60 s tail: a composite root's result applied, its queue row kept).
// The lease functions lock in one statement and stamp in the next, on a
// snapshot that sees the new version, in one call: the store no longer
// re-runs them, so a release or an adoption racing an update passes here
// only if its one call stamps the row.

// beatUncommitted opens a transaction that stamps id's queue row (as the
// broker's heartbeater does) and leaves it open, holding the row lock; the
// returned func commits it.
func (f *fx) beatUncommitted(id uuid.UUID) func() {
	f.t.Helper()
	conn, err := f.pool.Acquire(f.ctx)
	require.NoError(f.t, err)
	tx, err := conn.Begin(f.ctx)
	require.NoError(f.t, err)
	_, err = tx.Exec(f.ctx, `UPDATE work_queue SET heartbeat_at = now() WHERE resource_id = $1`, id)
	require.NoError(f.t, err)
	return func() {
		require.NoError(f.t, tx.Commit(f.ctx))
		conn.Release()
	}
}

// waitBlocked waits until a backend running a statement that contains
// fragment waits on a lock.
func (f *fx) waitBlocked(fragment string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		return scalar[int](f, `SELECT count(*) FROM pg_stat_activity
		                        WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`, fragment) > 0
	}, 20*time.Second, 5*time.Millisecond, "a statement with %q waits on a lock", fragment)
}

func TestDrain_AResultRacingAHeartbeatStillFinishesItsTask(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	f.schedule(id)
	task := f.claimOne("leaf")
	require.NoError(t, f.st.AppendOutbox(f.ctx, task.Result(json.RawMessage(`{"ok":true}`))))

	commit := f.beatUncommitted(id)
	type drained struct {
		n   int
		err error
	}
	done := make(chan drained, 1)
	go func() {
		n, err := f.st.DrainOutboxBatch(f.ctx, 1000, 0, 255)
		done <- drained{n, err}
	}()
	f.waitBlocked("drain_outbox_batch")
	commit()
	d := <-done
	require.NoError(t, d.err)
	require.Equal(t, 1, d.n)

	require.Equal(t, "Ready", f.phase(id))
	require.False(t, f.isQueued(id), "the finished task's row is deleted, not left leased for the reaper")
}

func TestDrain_ATransientFailureRacingAHeartbeatIsRePended(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	f.schedule(id)
	task := f.claimOne("leaf")
	require.NoError(t, f.st.AppendOutbox(f.ctx, task.Failure("flaky", false)))

	commit := f.beatUncommitted(id)
	done := make(chan error, 1)
	go func() {
		_, err := f.st.DrainOutboxBatch(f.ctx, 1000, 0, 255)
		done <- err
	}()
	f.waitBlocked("drain_outbox_batch")
	commit()
	require.NoError(t, <-done)

	q, ok := f.queued(id, TaskReconcile)
	require.True(t, ok, "a transient failure keeps its row")
	require.False(t, q.Leased, "…re-pended with its lease cleared, not left leased")
}

func TestRelease_RacingAHeartbeatStillReleases(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	id := f.res("leaf", "a")
	f.schedule(id)
	task := f.claimOne("leaf")

	commit := f.beatUncommitted(id)
	type released struct {
		n   int
		err error
	}
	done := make(chan released, 1)
	go func() {
		n, err := f.st.Release(f.ctx, all, []TaskKey{task.Key})
		done <- released{n, err}
	}()
	f.waitBlocked("lease_release(")
	commit()
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, 1, r.n)
	q, ok := f.queued(id, TaskReconcile)
	require.True(t, ok)
	require.False(t, q.Leased, "the released task is claimable at once, not after the lease timeout")
}

// newDeadMemberFx is the scene of the reaper's tests: a leaf's reconcile
// task pending (id) and a member whose process crashed (dead).
func newDeadMemberFx(t *testing.T) (f *fx, id uuid.UUID, dead string) {
	t.Helper()
	f = newFx(t)
	f.kind("leaf", reactWorker)
	id = f.res("leaf", "a")
	f.schedule(id)
	return f, id, f.deadMember()
}

// deadMember records a cluster member whose session lock nobody holds (its
// process crashed) and returns its id.
func (f *fx) deadMember() string {
	f.t.Helper()
	id := "dead-" + uuid.NewString()[:8]
	f.exec(`INSERT INTO cluster_members (member_id, role, lock_key) VALUES ($1, 'broker', 987654)`, id)
	return id
}

func TestReapUnlocked_AFreedLeaseStillTakesItsClaimsRedeliveredResult(t *testing.T) {
	t.Parallel()
	f, id, dead := newDeadMemberFx(t)
	claimed := f.claimOneAs(dead, "leaf")
	require.Equal(t, []string{dead}, scalar[[]string](f, `SELECT coalesce(array_agg(x), '{}') FROM reap_unlocked_cluster_members(NULL) x`))
	q, ok := f.queued(id, TaskReconcile)
	require.True(t, ok)
	require.False(t, q.Leased, "the dead member's lease is freed for re-claim at once")

	// Its worker redelivers the claim's result before anyone re-claims.
	f.finish(claimed.Result(json.RawMessage(`{"from":"the dead broker's claim"}`)))
	require.Equal(t, "Ready", f.phase(id), "the claim's own result applies: no re-run")
	require.False(t, f.isQueued(id))
}

// redeliveryGrace is how long reap_unlocked_cluster_members keeps a dead
// member's freed task from being claimed again.
const redeliveryGrace = time.Second

func TestReapUnlocked_AReClaimFencesTheDeadClaimsResult(t *testing.T) {
	t.Parallel()
	f, id, dead := newDeadMemberFx(t)
	claimed := f.claimOneAs(dead, "leaf")
	reapedAt := scalar[time.Time](f, `SELECT now() FROM reap_unlocked_cluster_members(NULL)`)
	f.st.Clock = func() time.Time { return reapedAt.Add(redeliveryGrace - time.Millisecond) }
	require.Empty(t, f.claim("leaf", 1), "within the redelivery grace the freed task waits for its worker's adoption")
	f.st.Clock = func() time.Time { return reapedAt.Add(redeliveryGrace) }
	again := f.claimOne("leaf")
	require.Greater(t, again.ClaimEpoch, claimed.ClaimEpoch)

	f.finish(claimed.Result(json.RawMessage(`{"from":"dead"}`)))
	require.Equal(t, "Reconciling", f.phase(id), "once re-claimed, the dead claim's result is fenced out")
	f.finish(again.Result(json.RawMessage(`{"from":"successor"}`)))
	require.Equal(t, "Ready", f.phase(id))
}

// A claim the dead broker sent before it died can still be executing in its
// backend when a peer's probe removes the member, and commit after: its
// leases carry an id nobody heartbeats. The next probe frees them (not the
// stale-lease reaper a minute later).
func TestReapUnlocked_AClaimCommittingAfterTheRemovalIsFreedByTheNextProbe(t *testing.T) {
	t.Parallel()
	f, id, dead := newDeadMemberFx(t)
	require.Equal(t, []string{dead}, scalar[[]string](f, `SELECT coalesce(array_agg(x), '{}') FROM reap_unlocked_cluster_members(NULL) x`))

	// The in-flight claim commits after the removal.
	claimed := f.claimOneAs(dead, "leaf")
	q, ok := f.queued(id, TaskReconcile)
	require.True(t, ok)
	require.True(t, q.Leased)

	require.Empty(t, scalar[[]string](f, `SELECT coalesce(array_agg(x), '{}') FROM reap_unlocked_cluster_members(NULL) x`),
		"no member is removed twice")
	q, ok = f.queued(id, TaskReconcile)
	require.True(t, ok)
	require.False(t, q.Leased, "the late claim's lease is freed by the next probe")
	require.Equal(t, claimed.ClaimEpoch, scalar[int64](f, `SELECT claim_epoch FROM work_queue WHERE resource_id = $1`, id),
		"…keeping its claim_epoch: a redelivered result of that claim still applies")
}

// A member that had only lost its lock registers again under the same id:
// its tombstone no longer frees the leases it takes after.
func TestReapUnlocked_AMemberRegisteredAgainKeepsItsLeases(t *testing.T) {
	t.Parallel()
	f, id, member := newDeadMemberFx(t)
	f.exec(`SELECT reap_unlocked_cluster_members(NULL)`)
	f.exec(`INSERT INTO cluster_members (member_id, role) VALUES ($1, 'broker')`, member)

	f.claimOneAs(member, "leaf")
	f.exec(`SELECT reap_unlocked_cluster_members(NULL)`)
	q, ok := f.queued(id, TaskReconcile)
	require.True(t, ok)
	require.True(t, q.Leased, "a registered member's lease is its own")
}

// A successor broker adopts the lease a worker reports resumed at the very
// moment its reaper frees the dead claimer's leases: the adoption waits on
// the reaper's row lock and must still take the freed row (same epoch), or
// the task is claimed again and the worker's finished result is fenced out
// (a re-run where a redelivery was due).
func TestAdopt_RacingTheReaperStillAdopts(t *testing.T) {
	t.Parallel()
	f, id, dead := newDeadMemberFx(t)
	claimed := f.claimOneAs(dead, "leaf")

	conn, err := f.pool.Acquire(f.ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(f.ctx)
	require.NoError(t, err)
	var reaped []string
	require.NoError(t, tx.QueryRow(f.ctx, `SELECT coalesce(array_agg(x), '{}') FROM reap_unlocked_cluster_members(NULL) x`).Scan(&reaped))
	require.Equal(t, []string{dead}, reaped)

	type adopted struct {
		keys []TaskKey
		err  error
	}
	done := make(chan adopted, 1)
	go func() {
		keys, err := f.st.Adopt(f.ctx, "successor", []Held{{Key: claimed.Key, Epoch: claimed.ClaimEpoch}})
		done <- adopted{keys, err}
	}()
	f.waitBlocked("lease_adopt(")
	require.NoError(t, tx.Commit(f.ctx))
	a := <-done
	require.NoError(t, a.err)
	require.Equal(t, []TaskKey{claimed.Key}, a.keys, "the freed lease is adopted under its epoch")
	require.Equal(t, "successor", scalar[string](f, `SELECT worker_id FROM work_queue WHERE resource_id = $1`, id))

	f.finish(claimed.Result(json.RawMessage(`{"from":"the worker, redelivered"}`)))
	require.Equal(t, "Ready", f.phase(id), "the claim's own result applies: no re-run")
}
