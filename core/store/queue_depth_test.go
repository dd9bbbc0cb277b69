package store

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueueDepth_EstimatesFromStatisticsWithoutReadingTheQueue fills the
// queue, analyses it, and checks the estimate against the truth; then it
// doubles the queue without analysing and checks the estimate did not move:
// the gauge reads the catalog, never the rows.
func TestQueueDepth_EstimatesFromStatisticsWithoutReadingTheQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t)
	fill := func(from, to int) {
		t.Helper()
		// 3/4 vpc, 1/4 subnet; every 5th row leased.
		_, err := e.pool.Exec(ctx, `
INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, worker_id, claim_epoch)
SELECT md5('q' || g)::uuid, 'reconcile', shard_of(md5('q' || g)::uuid),
       CASE WHEN g % 4 = 0 THEN 'subnet' ELSE 'vpc' END, 'v1', 1,
       CASE WHEN g % 5 = 0 THEN 'w' END, CASE WHEN g % 5 = 0 THEN g END
  FROM generate_series($1::int, $2::int - 1) g`, from, to)
		require.NoError(t, err)
	}

	// No autovacuum analyze may land between the steps below.
	_, err := e.pool.Exec(ctx, `DO $$ DECLARE p regclass; BEGIN
	    FOR p IN SELECT inhrelid::regclass FROM pg_inherits WHERE inhparent = 'work_queue'::regclass LOOP
	        EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', p);
	    END LOOP; END $$`)
	require.NoError(t, err)

	got, err := e.store.QueueDepth(ctx)
	require.NoError(t, err)
	for k, v := range got {
		require.Zero(t, v, "%v: an empty, never-analysed queue estimates zero", k)
	}

	fill(0, 4000)
	_, err = e.pool.Exec(ctx, `ANALYZE work_queue`)
	require.NoError(t, err)
	got, err = e.store.QueueDepth(ctx)
	require.NoError(t, err)
	want := map[[2]string]float64{
		{"vpc", "pending"}: 2400, {"vpc", "leased"}: 600,
		{"subnet", "pending"}: 800, {"subnet", "leased"}: 200,
	}
	var total float64
	for k, w := range want {
		require.InDelta(t, w, got[k], w*0.1, "%v: within 10%% of the truth after an analyze", k)
	}
	for _, v := range got {
		total += v
	}
	require.InDelta(t, 4000, total, 40, "the estimates add up to the queue")

	fill(4000, 8000)
	again, err := e.store.QueueDepth(ctx)
	require.NoError(t, err)
	require.Equal(t, got, again, "without a new analyze the estimate stands: no row was read")
}
