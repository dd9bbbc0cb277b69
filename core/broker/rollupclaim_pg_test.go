package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/pipeline"
)

// End to end on Postgres: a pair whose room is full of tasks that do not
// finish (composes waiting for their slots) still claims a rollup pended
// after them, and only the rollup: the queued composes stay unclaimed.
func TestDispatcher_AFullPairStillClaimsItsRollupsAgainstPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	running := map[uuid.UUID]bool{}
	rollups := make(chan uuid.UUID, 1)
	q := startPgDispatcher(t, func(d *dispatcher) {
		d.caps, d.drain = pairCaps{base: 4}, 10*time.Millisecond
		d.rollupBound = func(p pairKey) (int, bool) { return 2, p == pairVPC }
		d.runner = &fakeRunner{RunFn: func(tctx context.Context, _ pipeline.Lease, task pipeline.Task) {
			if task.IsRollup() {
				rollups <- task.Key.ResourceID
				return
			}
			mu.Lock()
			running[task.Key.ResourceID] = true
			mu.Unlock()
			<-tctx.Done() // a compose waiting for its slot until the test ends
		}}
	})

	pend := func(rollup bool) uuid.UUID {
		t.Helper()
		tx := q.begin(ctx)
		id := q.pend(ctx, tx)
		if rollup {
			_, err := tx.Exec(ctx, `UPDATE work_queue SET trigger = 'childrenSettled' WHERE resource_id = $1`, id)
			require.NoError(t, err)
		}
		require.NoError(t, tx.Commit(ctx))
		return id
	}
	for range 10 {
		pend(false)
	}
	require.Eventually(t, func() bool { return q.d.tasks.pair(pairVPC) == 4 }, 30*time.Second, 5*time.Millisecond,
		"the pair fills its room of 4 and its tasks do not finish")

	want := pend(true)
	select {
	case got := <-rollups:
		require.Equal(t, want, got, "the rollup is claimed though the pair is full")
	case <-time.After(stallBound):
		t.Fatalf("the rollup was not claimed within %s while its pair was full", stallBound)
	}
	var leased int
	require.NoError(t, q.pool.QueryRow(ctx, `SELECT count(*) FROM work_queue WHERE worker_id IS NOT NULL AND trigger <> 'childrenSettled'`).Scan(&leased))
	require.Equal(t, 4, leased, "nothing but the rollup was claimed beyond the room")
	mu.Lock()
	require.Len(t, running, 4)
	mu.Unlock()
}

// End to end on Postgres: while a result has waited in the outbox longer
// than the bound, the dispatcher claims a pended rollup but not the leaf
// pended beside it in the same transaction; once the drain has taken the
// result, the leaf is claimed.
func TestDispatcher_ClaimsWaitForTheDrainAgainstPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rollups := make(chan uuid.UUID, 1)
	// The old result is in the outbox before the dispatcher starts: its
	// first read of the lag already sees it (a read is trusted for
	// lagEvery, so a row seeded after a read could go unseen that long).
	q := newPgQueue(t)
	_, err := q.pool.Exec(ctx, `INSERT INTO work_outbox (shard_id, resource_id, task_type, claim_epoch, generation, created_at)
	                            VALUES (7, gen_random_uuid(), 'reconcile', 1, 1, now() - interval '5 seconds')`)
	require.NoError(t, err)
	q.start(func(d *dispatcher) {
		d.maxDrainLag = time.Second
		d.rollupBound = func(p pairKey) (int, bool) { return 2, p == pairVPC }
		run := d.runner.(*fakeRunner).RunFn
		d.runner = &fakeRunner{RunFn: func(tctx context.Context, l pipeline.Lease, task pipeline.Task) {
			if task.IsRollup() {
				rollups <- task.Key.ResourceID
			}
			run(tctx, l, task)
		}}
	})

	tx := q.begin(ctx)
	leaf, rollup := q.pend(ctx, tx), q.pend(ctx, tx)
	_, err = tx.Exec(ctx, `UPDATE work_queue SET trigger = 'childrenSettled' WHERE resource_id = $1`, rollup)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	select {
	case got := <-rollups:
		require.Equal(t, rollup, got)
	case <-time.After(stallBound):
		t.Fatalf("the rollup was not claimed within %s while the drain was behind", stallBound)
	}
	var leased bool
	require.NoError(t, q.pool.QueryRow(ctx, `SELECT worker_id IS NOT NULL FROM work_queue WHERE resource_id = $1`, leaf).Scan(&leased))
	require.False(t, leased, "the leaf pended with the rollup waits for the drain")
	require.GreaterOrEqual(t, testutil.ToFloat64(q.d.metrics.OutboxLag), 5.0, "the gauge shows the wait")

	committed := time.Now()
	_, err = q.pool.Exec(ctx, `DELETE FROM work_outbox; SELECT pg_notify('work_ready', '')`)
	require.NoError(t, err)
	waited := q.waitClaimed(leaf, committed)
	require.Less(t, waited, stallBound+lagEvery, "the leaf is claimed once the drain caught up")
}
