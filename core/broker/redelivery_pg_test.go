package broker

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/db/pgtest"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// A result a worker redelivers because its ack never came may already have
// been written by the broker that died (or be redelivered twice): every copy
// is written and acked, and the drain's claim_epoch fence applies it once. A
// transient failure shows it — each application re-pends the task with
// attempts+1, so a double apply would read 2.
func TestCompletionsRedelivery_AppliesOncePerClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	ps, tasks := claimedVPCs(ctx, t, pool, "broker-dead", 1)
	tk, id := tasks[0], tasks[0].Key.ResourceID
	tid := taskID{key: tk.Key, epoch: tk.ClaimEpoch, generation: tk.Generation, stage: "STAGE_WORK", final: true}.String()
	stale := taskID{key: tk.Key, epoch: tk.ClaimEpoch - 1, generation: tk.Generation, stage: "STAGE_WORK", final: true}.String()

	c := newCompletions(syncResults{ps}, testLog(t))
	drain := func() {
		for {
			popped, err := ps.DrainOutboxBatch(ctx, 100, 0, 255)
			require.NoError(t, err)
			if popped == 0 {
				return
			}
		}
	}
	acks := 0
	// The dead broker's write, the redelivery to its successor, a stale
	// claim's; each drained on its own, so the fence, not the coalescing of
	// one batch, is what keeps the copies from applying again.
	for _, id := range []string{tid, tid, stale} {
		c.complete(&workerv1.StageComplete{TaskId: id, Result: &workerv1.StageComplete_Error{
			Error: &workerv1.TaskError{Message: "api throttled"}}}, func() { acks++ })
		drain()
	}
	require.Equal(t, 3, acks, "every copy is acked once written")
	var attempts int
	var epoch *int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT attempts, claim_epoch FROM work_queue WHERE resource_id = $1`, id).
		Scan(&attempts, &epoch))
	require.Equal(t, 1, attempts, "the failure applied once, not once per copy")
	require.Nil(t, epoch, "re-pended with its lease cleared")
}

// claimedVPCs creates n vpc resources (a kind with one work reaction),
// schedules them and claims their reconciles as holder.
func claimedVPCs(ctx context.Context, t *testing.T, pool *pgxpool.Pool, holder string, n int) (*pipeline.Store, []pipeline.Task) {
	t.Helper()
	_, err := pool.Exec(ctx, `INSERT INTO kind_manifest (kind, version, manifest) VALUES ('vpc', 'v1',
	    '{"kind":"vpc","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}')`)
	require.NoError(t, err)
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
		_, err = pool.Exec(ctx, `INSERT INTO resources (id, kind, version, name, spec, labels, shard_id)
		                         VALUES ($1, 'vpc', 'v1', $2, '{}', '{}', shard_of($1))`, ids[i], fmt.Sprintf("vpc-%d", i+1))
		require.NoError(t, err)
	}
	var scheduled int
	require.NoError(t, pool.QueryRow(ctx, `SELECT schedule_eligible($1::uuid[], now())`, ids).Scan(&scheduled))
	require.Equal(t, n, scheduled)
	ps := pipeline.New(pool)
	tasks, err := ps.Claim(ctx, pipeline.Lease{WorkerID: holder, Lo: 0, Hi: 255},
		pipeline.Batch{Kind: "vpc", Version: "v1", TaskType: pipeline.TaskReconcile, Max: n})
	require.NoError(t, err)
	require.Len(t, tasks, n)
	return ps, tasks
}
