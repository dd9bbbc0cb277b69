package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/core/store/pipeline"
)

// failedResync is a Ready row of a resync-enabled kind in shard sh whose
// drift resync failed retryably at t0: Failed for its live spec while synced
// (failure_gen = synced_gen = generation), its task backing off in the queue.
func (f *fixture) failedResync(sh int) string {
	f.t.Helper()
	id := f.res(res{kind: "probe", shard: sh})
	n, err := f.at(t0).RequeueForResync(ctx, maintenance.Resync{Kind: "probe", Version: "v1", Interval: time.Minute},
		shard.Between(sh, sh), 10)
	require.NoError(f.t, err)
	require.Equal(f.t, 1, n)
	p := f.pipe(t0)
	tasks, err := p.Claim(ctx, pipeline.Lease{WorkerID: "worker", Lo: sh, Hi: sh},
		pipeline.Batch{Kind: "probe", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 10})
	require.NoError(f.t, err)
	require.Len(f.t, tasks, 1)
	require.NoError(f.t, p.AppendOutbox(ctx, tasks[0].Failure("the probe timed out", false)))
	_, err = p.DrainOutboxBatch(ctx, 10, sh, sh)
	require.NoError(f.t, err)
	require.Equal(f.t, "Failed", f.phase(id))
	require.True(f.t, f.bool(`SELECT synced_gen = generation AND failure_gen = generation AND NOT failure_terminal
	                            FROM resources WHERE id = $1`, id), "failed for its live spec while synced")
	require.Equal(f.t, []task{{taskType: "reconcile", trigger: "resync", gen: 1}}, f.tasks(id), "its retry backs off in the queue")
	return id
}

// A synced row whose resync failed retryably is retried by its own queue
// row. When that row is lost — the unclaimed-work GC drops it after its
// window (a kind whose workers went away), or a crash restart of Postgres
// empties the UNLOGGED queue — the drift resyncer passes it by (it is not
// Ready or Degraded) and it is not lagging its spec. The reaper's retry of
// failed rows queues it a resync again once its retry window has passed;
// until then, explain says the reaper retries it.
func TestRequeueFailedAndPending_RetriesAFailedResyncWhoseTaskWasLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "probe", resyncSecs: 60})
	const sh = 7
	id := f.failedResync(sh)

	gates := func(now time.Time) []string {
		rows, err := f.db.Query(ctx, `SELECT gate FROM explain_resource($1, $2)`, id, now)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var g string
			require.NoError(t, rows.Scan(&g))
			out = append(out, g)
		}
		require.NoError(t, rows.Err())
		return out
	}
	later := t0.Add(maintenance.DefaultUnclaimedAfter + time.Hour)
	require.Equal(t, []string{"backoff", "no_worker"}, gates(t0), "explain follows the retry backing off")
	n, err := f.at(later).DeleteUnclaimedWork(ctx, shard.Between(sh, sh), maintenance.DefaultUnclaimedAfter)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the GC drops the retry nobody claimed")
	require.Empty(t, f.tasks(id))

	require.Equal(t, []string{"failed_retry"}, gates(later), "explain names what retries it")

	n, err = f.at(later).RequeueForResync(ctx, maintenance.Resync{Kind: "probe", Version: "v1", Interval: time.Minute},
		shard.Between(sh, sh), 10)
	require.NoError(t, err)
	require.Zero(t, n, "the drift resyncer re-observes settled rows only")
	n, err = f.at(later).RequeueFailedAndPending(ctx, shard.Between(sh, sh), 10, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the reaper retries the failed resync")
	require.Equal(t, []task{{taskType: "reconcile", trigger: "resync", gen: 1}}, f.tasks(id))
	require.Equal(t, "Failed", f.phase(id), "still Failed until the retry lands")
	require.Equal(t, []string{"no_worker", "queued"}, gates(later), "explain follows the queued retry (no broker serves the kind here)")

	n, err = f.at(later.Add(time.Hour)).RequeueFailedAndPending(ctx, shard.Between(sh, sh), 10, time.Minute)
	require.NoError(t, err)
	require.Zero(t, n, "a queued retry is in hand")
}
