package broker

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/db/pgtest"
)

// End to end on Postgres: a pair whose room is full of tasks that do not
// finish (composes waiting for their slots) still claims a rollup pended
// after them, and only the rollup: the queued composes stay unclaimed.
func TestDispatcher_AFullPairStillClaimsItsRollupsAgainstPostgres(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	pool := pgtest.Pool(t)
	_, err := pool.Exec(ctx, `INSERT INTO kind_manifest (kind, version, manifest) VALUES ('vpc', 'v1',
	    '{"kind":"vpc","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}')`)
	require.NoError(t, err)

	var mu sync.Mutex
	running := map[uuid.UUID]bool{}
	rollups := make(chan uuid.UUID, 1)
	log := testLog(t)
	listener := notify.NewListener(pool, log)
	var wg sync.WaitGroup
	wg.Go(func() { _ = listener.Run(ctx) })
	d := &dispatcher{id: "broker-1", claims: pipeline.New(pool),
		routes: &fakeRoutes{PairsFn: func() []pairKey { return []pairKey{pairVPC} }},
		shards: fakeShards{0, 255, true}, tasks: newInflight(),
		runner: &fakeRunner{RunFn: func(tctx context.Context, _ pipeline.Lease, task pipeline.Task) {
			if task.IsRollup() {
				rollups <- task.Key.ResourceID
				return
			}
			mu.Lock()
			running[task.Key.ResourceID] = true
			mu.Unlock()
			<-tctx.Done() // a compose waiting for its slot until the test ends
		}},
		wakes: listenerWaker{listener}, metrics: metrics.New(), clock: engine.RealClock, log: log,
		pairCap: 4, pollMin: DefaultPollMin, pollMax: DefaultPollMax, drain: 10 * time.Millisecond,
		rollupBound: func(p pairKey) (int, bool) { return 2, p == pairVPC }}
	select {
	case <-listener.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("listener never ready")
	}
	wg.Go(func() { _ = d.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	pend := func(rollup bool) uuid.UUID {
		t.Helper()
		id := uuid.New()
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `INSERT INTO resources (id, kind, version, name, spec, labels, shard_id)
			                           VALUES ($1, 'vpc', 'v1', $2, '{}', '{}', shard_of($1))`, id, "vpc-"+id.String()); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT schedule_eligible(ARRAY[$1]::uuid[], now())`, id); err != nil {
				return err
			}
			if rollup {
				_, err := tx.Exec(ctx, `UPDATE work_queue SET trigger = 'childrenSettled' WHERE resource_id = $1`, id)
				return err
			}
			return nil
		}))
		return id
	}
	queued := make([]uuid.UUID, 10)
	for i := range queued {
		queued[i] = pend(false)
	}
	require.Eventually(t, func() bool { return d.tasks.pair(pairVPC) == 4 }, 30*time.Second, 5*time.Millisecond,
		"the pair fills its room of 4 and its tasks do not finish")

	want := pend(true)
	select {
	case got := <-rollups:
		require.Equal(t, want, got, "the rollup is claimed though the pair is full")
	case <-time.After(stallBound):
		t.Fatalf("the rollup was not claimed within %s while its pair was full", stallBound)
	}
	var leased int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM work_queue WHERE worker_id IS NOT NULL AND trigger <> 'childrenSettled'`).Scan(&leased))
	require.Equal(t, 4, leased, "nothing but the rollup was claimed beyond the room")
	mu.Lock()
	require.Len(t, running, 4)
	mu.Unlock()
}
