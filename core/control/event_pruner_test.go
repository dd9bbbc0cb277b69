package control

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/db/pgtest"
)

// A tick deletes batch after batch until one comes back short or the tick's
// batches are spent, each with the cutoff the clock and the retention give;
// a failed batch ends the tick, and the next tick tries again.
func TestEventPruner_BatchesATick(t *testing.T) {
	t.Parallel()
	type call struct {
		before time.Time
		limit  int
	}
	clock := newClock()
	calls := make(chan call, 100)
	results := make(chan error, 100)
	backlog := 25 // events expired, deleted 10 a batch
	p := &EventPruner{Prune: func(_ context.Context, before time.Time, limit int) (int, error) {
		calls <- call{before, limit}
		if err := <-results; err != nil {
			return 0, err
		}
		n := min(backlog, limit)
		backlog -= n
		return n, nil
	}, Retention: time.Hour, Batch: 10, Batches: 2, Clock: clock, Log: zerolog.Nop()}
	p.TestSignals.Init()
	for range 2 {
		results <- nil
	}
	runService(t, p)
	require.Equal(t, 20, p.TestSignals.Pruned.WaitOrTimeout(t), "two full batches spend the tick")
	require.Equal(t, call{t0.Add(-time.Hour), 10}, <-calls)
	require.Equal(t, call{t0.Add(-time.Hour), 10}, <-calls)

	results <- errors.New("boom")
	advanceOnce(t, clock, time.Minute)
	require.Equal(t, 0, p.TestSignals.Pruned.WaitOrTimeout(t), "a failed batch ends the tick")
	require.Equal(t, call{t0.Add(time.Minute - time.Hour), 10}, <-calls, "the cutoff moves with the clock")

	results <- nil
	advanceOnce(t, clock, time.Minute)
	require.Equal(t, 5, p.TestSignals.Pruned.WaitOrTimeout(t), "a short batch ends the tick")
	<-calls
	require.Empty(t, calls)
}

// With no retention the pruner deletes nothing and ends at once.
func TestEventPruner_NoRetentionKeepsEverything(t *testing.T) {
	t.Parallel()
	p := &EventPruner{Prune: func(context.Context, time.Time, int) (int, error) {
		t.Error("pruned with no retention")
		return 0, nil
	}, Log: zerolog.Nop()}
	// A pruner that ticked would call Prune at once and then run until the
	// deadline; one with no retention returns before it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, p.Run(ctx))
	require.NoError(t, ctx.Err(), "Run returned at once")
}

// End to end on a real database: a pruner with a day's retention deletes the
// events older than a day, across several batches, and keeps the rest.
func TestEventPruner_DeletesExpiredEvents(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO resources (id, kind, version, name, shard_id) VALUES ('00000000-0000-0000-0000-000000000001', 'leaf', 'v1', 'r', 0)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `
INSERT INTO resource_events (resource_id, type, reason, created_at)
SELECT '00000000-0000-0000-0000-000000000001', 'Normal', 'Test',
       $1::timestamptz - CASE WHEN g <= 2500 THEN interval '2 days' ELSE interval '1 hour' END
  FROM generate_series(1, 3000) g`, t0)
	require.NoError(t, err)
	p := &EventPruner{Prune: maintenance.New(pool).PruneEvents, Retention: 24 * time.Hour, Batch: 1000,
		Clock: newClock(), Log: zerolog.Nop()}
	p.TestSignals.Init()
	runService(t, p)
	require.Equal(t, 2500, p.TestSignals.Pruned.WaitOrTimeout(t))
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM resource_events WHERE created_at >= $1::timestamptz - interval '1 day'`, t0).Scan(&left))
	require.Equal(t, 500, left)
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM resource_events`).Scan(&left))
	require.Equal(t, 500, left, "only the young events are left")
}
