package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
)

func TestReapStaleWork_FreesLeasesWhoseHeartbeatLapsed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	const stale = 30 * time.Second

	cases := map[string]struct {
		reason    string
		shard     int
		worker    string
		heartbeat time.Time
		wantFreed bool
	}{
		"DeadWorker":     {reason: "heartbeat older than the window: its worker died", shard: 3, worker: "w1", heartbeat: t0.Add(-2 * stale), wantFreed: true},
		"LiveWorker":     {reason: "a fresh heartbeat keeps the lease", shard: 4, worker: "w2", heartbeat: t0.Add(-stale / 2)},
		"Pending":        {reason: "an unclaimed row has no lease to free", shard: 5},
		"OutsideRange":   {reason: "another reaper's shard", shard: 40, worker: "w3", heartbeat: t0.Add(-2 * stale)},
		"DeadOtherShard": {reason: "every dead lease in the range", shard: 6, worker: "w4", heartbeat: t0.Add(-time.Hour), wantFreed: true},
	}
	ids := map[string]string{}
	for name, tc := range cases {
		id := f.res(res{shard: tc.shard, gen: 2, lagging: true})
		f.task(id, "reconcile", tc.worker, tc.heartbeat, t0.Add(-time.Hour))
		ids[name] = id
	}
	n, err := f.at(t0).ReapStaleWork(ctx, shard.Between(0, 15), stale)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for name, tc := range cases {
		var leased, epoch bool
		var notBefore time.Time
		require.NoError(t, f.db.QueryRow(ctx, `SELECT worker_id IS NOT NULL, claim_epoch IS NOT NULL, not_before
		                                         FROM work_queue WHERE resource_id = $1`, ids[name]).Scan(&leased, &epoch, &notBefore))
		if tc.wantFreed {
			require.False(t, leased, "%s: %s", name, tc.reason)
			require.False(t, epoch, "%s: the dead worker's claim epoch is fenced out", name)
			require.True(t, notBefore.Equal(t0), "%s: claimable now", name)
		} else {
			require.Equal(t, tc.worker != "", leased, "%s: %s", name, tc.reason)
		}
	}
}

func TestDeleteUnclaimedWork_DropsOnlyLongUnclaimedRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	day := maintenance.DefaultUnclaimedAfter

	cases := map[string]struct {
		reason    string
		shard     int
		worker    string
		notBefore time.Time
		wantGone  bool
	}{
		"Abandoned":    {reason: "claimable for more than a day: its kind lost its workers", shard: 1, notBefore: t0.Add(-day - time.Minute), wantGone: true},
		"Young":        {reason: "inside the window", shard: 2, notBefore: t0.Add(-day + time.Minute)},
		"LeasedOld":    {reason: "a leased row is reap_stale_work's business", shard: 3, worker: "w", notBefore: t0.Add(-2 * day)},
		"OutsideRange": {reason: "another reaper's shard", shard: 100, notBefore: t0.Add(-2 * day)},
	}
	ids := map[string]string{}
	for name, tc := range cases {
		id := f.res(res{shard: tc.shard, gen: 2, lagging: true, updatedAt: t0.Add(-3 * day)})
		f.task(id, "reconcile", tc.worker, t0, tc.notBefore)
		ids[name] = id
	}
	store := f.at(t0)
	n, err := store.DeleteUnclaimedWork(ctx, shard.Between(0, 15), day)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	for name, tc := range cases {
		require.Equal(t, tc.wantGone, len(f.tasks(ids[name])) == 0, "%s: %s", name, tc.reason)
	}

	n, err = store.DeleteUnclaimedWork(ctx, shard.Between(0, 15), day)
	require.NoError(t, err)
	require.Zero(t, n, "idle: nothing left past the window")

	n, err = store.RequeueFailedAndPending(ctx, shard.Between(1, 1), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, n, "garbage collection, not abandonment: the lagging row is re-enqueued by the catch-up")
}

// The GC drops only work that comes back: a lagging resource's reconcile
// (the catch-up re-enqueues it) and a delete (the sweep does). An
// operation's task has no such backstop: dropped alone, its operation stayed
// Pending for good, neither run nor refused; it is failed instead, saying
// why. Nor does a synced composite's re-pended rollup (the catch-up takes
// lagging rows only): dropped, the composite kept what it had rolled up
// before its children changed, whenever its kind's workers came back; it
// stays queued.
func TestDeleteUnclaimedWork_LeavesNothingStrandedWithoutItsTask(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	f.kind(kind{name: "comp", hasComposer: true, hasRollup: true})
	day := maintenance.DefaultUnclaimedAfter
	old := t0.Add(-day - time.Minute)

	target := f.res(res{shard: 1})
	var op string
	require.NoError(t, f.db.QueryRow(ctx, `INSERT INTO resource_operations (resource_id, verb) VALUES ($1, 'flip') RETURNING id::text`,
		target).Scan(&op))
	f.exec(`INSERT INTO work_queue (resource_id, task_type, op_id, shard_id, kind, version, generation, trigger, not_before, created_at)
	        SELECT id, 'operate', $2, shard_id, kind, version, generation, 'operation', $3, $3 FROM resources WHERE id = $1`,
		target, op, old)

	root := f.res(res{kind: "comp", shard: 2, composedGen: 1})
	f.exec(`INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, trigger, not_before, created_at)
	        SELECT id, 'reconcile', shard_id, kind, version, generation, 'childrenSettled', $2, $2 FROM resources WHERE id = $1`,
		root, old)

	n, err := f.at(t0).DeleteUnclaimedWork(ctx, shard.Between(0, 15), day)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the operation's task only")
	require.Empty(t, f.tasks(target))
	var state, msg string
	require.NoError(t, f.db.QueryRow(ctx, `SELECT state, coalesce(error, '') FROM resource_operations WHERE id = $1`, op).Scan(&state, &msg))
	require.Equal(t, "Failed", state, "an operation whose task is dropped is finished, not left Pending")
	require.Contains(t, msg, "SWEEPER_UNCLAIMED_DELETE_AFTER", "the failure names the limit")
	require.Equal(t, []task{{taskType: "reconcile", trigger: "childrenSettled", gen: 1}}, f.tasks(root),
		"the synced composite's rollup stays queued: nothing else would pend it again")
}
