package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
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
		d.pairCap, d.drain = 4, 10*time.Millisecond
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
