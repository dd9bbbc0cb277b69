package lifecycle_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/internal/plantest"
	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/db/pgtest"
)

// TestPlans_ClaimPlannedOnAnEmptyOutbox: a broker's session makes its
// plans on a fresh install's empty tables and keeps what it cached until an
// ANALYZE replaces it — a prepared statement's generic plan once five calls
// cost no less than it, as they do on a near-empty outbox. After a burst of
// transitions fills the outbox (no ANALYZE), the same session's claim must
// still read the pending rows through their index, never scan a partition.
func TestPlans_ClaimPlannedOnAnEmptyOutbox(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.PoolFor(t, url)
	_, err := pool.Exec(ctx, `INSERT INTO reactor_bindings (name, watch_kind, transition, reactor) VALUES ('audit', 'vpc', 'synced', 'sink');
ANALYZE`)
	require.NoError(t, err)
	fill := func(n int) {
		t.Helper()
		_, err := pool.Exec(ctx, `
INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot, created_at)
SELECT gen_random_uuid(), 'synced', 1, 'audit', g % 16, 'sink', 'vpc', '{}', now() - g * interval '1 millisecond'
  FROM generate_series(1, $1) g`, n)
		require.NoError(t, err)
	}
	rec := &plantest.Recorder{}
	st := lifecycle.New(plantest.Session(t, pool.Config(), rec))
	// A claim, then the claimed rows' heartbeat, an ack and a release:
	// every statement a dispatcher sends.
	round := func(want int) {
		t.Helper()
		ds, err := st.Claim(ctx, "broker-1", []string{"sink"}, 0, 15, 50)
		require.NoError(t, err)
		require.Len(t, ds, want)
		n, err := st.Heartbeat(ctx, "broker-1", ds)
		require.NoError(t, err)
		require.Equal(t, want, n)
		acked, err := st.Ack(ctx, ds[0])
		require.NoError(t, err)
		require.True(t, acked)
		n, err = st.Release(ctx, "broker-1", ds[want-1:])
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	for i := range plantest.KeptPlanCalls {
		fill(2)
		round(2 + min(i, 1)) // the two new rows, and the one released last round
	}
	rec.Take(t)

	fill(20000)
	round(50) // the oldest: of the 20,000
	plans := rec.Take(t)
	plantest.Check(t, plans, plantest.Spec{Hot: []string{"lifecycle_outbox"}, Parts: []string{"lifecycle_outbox"},
		Bounded: []string{"lifecycle_outbox_heartbeat_at_idx"}, // the leased rows'
		Rules:   []plantest.Rule{{Match: "WITH picked AS", Uses: []string{"lifecycle_outbox_reactor_created_at_idx"}}}})
	t.Log("\n" + plantest.Summary(plans))
}

// TestPlans_ClaimReadsItsBatchNotTheBacklog: a reactor that lags holds a
// backlog; a claim of 50 must read about 50 rows, whatever the backlog and
// however many reactors the broker serves, and still hand them out oldest
// first across the reactors. (Ordered by age over reactor = ANY(...), the
// pending index gave no order: every claim read the whole backlog, 21,018
// buffers for 50 of 20,000.) It holds with the outbox analyzed and with its
// statistics taken while it was drained (it looks empty to the planner),
// and then the claimed rows' heartbeat, ack and release probe their keys.
func TestPlans_ClaimReadsItsBatchNotTheBacklog(t *testing.T) {
	t.Parallel()
	for _, stats := range []string{"analyzed", "emptied"} {
		t.Run(stats, func(t *testing.T) {
			t.Parallel()
			claimReadsItsBatch(t, stats)
		})
	}
}

func claimReadsItsBatch(t *testing.T, stats string) {
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.PoolFor(t, url)
	_, err := pool.Exec(ctx, `
INSERT INTO reactor_bindings (name, watch_kind, transition, reactor) VALUES ('audit', 'vpc', 'synced', 'sink'),
                                                                            ('billing', 'vpc', 'synced', 'meter');
INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot, created_at)
SELECT gen_random_uuid(), 'synced', 1, CASE WHEN g % 2 = 0 THEN 'audit' ELSE 'billing' END, g % 256,
       CASE WHEN g % 2 = 0 THEN 'sink' ELSE 'meter' END, 'vpc', '{}', now() - g * interval '1 millisecond'
  FROM generate_series(1, 40000) g;
ANALYZE`)
	require.NoError(t, err)
	if stats == "emptied" {
		plantest.AnalyzeEmptied(t, pool, "lifecycle_outbox")
	}
	rows, err := pool.Query(ctx, `SELECT resource_id FROM lifecycle_outbox WHERE shard_id < 128 ORDER BY created_at LIMIT 50`)
	require.NoError(t, err)
	oldest, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	rec := &plantest.Recorder{}
	st := lifecycle.New(plantest.Session(t, pool.Config(), rec))
	// The session's first call of the claim function also reads the
	// catalog to compile it; a claim for a reactor with no rows pays that
	// before the one measured.
	none, err := st.Claim(ctx, "broker-1", []string{"idle"}, 0, 127, 50)
	require.NoError(t, err)
	require.Empty(t, none)
	rec.Take(t)

	ds, err := st.Claim(ctx, "broker-1", []string{"sink", "meter"}, 0, 127, 50)
	require.NoError(t, err)
	got := make([]uuid.UUID, len(ds))
	reactors := map[string]int{}
	for i, d := range ds {
		got[i] = d.Key.ResourceID
		reactors[d.Reactor]++
	}
	require.ElementsMatch(t, oldest, got, "the 50 oldest of the shards 0-127")
	require.Equal(t, map[string]int{"sink": 25, "meter": 25}, reactors, "from both reactors")

	plans := rec.Take(t)
	plantest.Check(t, plans, plantest.Spec{Hot: []string{"lifecycle_outbox"},
		Rules: []plantest.Rule{{Match: "WITH picked AS", Uses: []string{"lifecycle_outbox_reactor_created_at_idx"}}}})
	t.Log("\n" + plantest.Summary(plans))
	for _, p := range plans {
		require.Less(t, p.Buffers(), int64(2000), "a claim of 50 reads its batch, not the backlog:\n%s", p)
	}

	n, err := st.Heartbeat(ctx, "broker-1", ds)
	require.NoError(t, err)
	require.Equal(t, len(ds), n)
	acked, err := st.Ack(ctx, ds[0])
	require.NoError(t, err)
	require.True(t, acked)
	n, err = st.Release(ctx, "broker-1", ds[1:])
	require.NoError(t, err)
	require.Equal(t, len(ds)-1, n)
	plans = rec.Take(t)
	// the heartbeat and the release find their rows among the leased ones
	// (the claimed-rows index holds what is in flight, not the backlog)
	plantest.Check(t, plans, plantest.Spec{Hot: []string{"lifecycle_outbox"}, Bounded: []string{"lifecycle_outbox_heartbeat_at_idx"}})
	for _, p := range plans {
		require.Less(t, p.Buffers(), int64(2000), "a statement over 50 claimed rows reads them, not the backlog:\n%s", p)
	}
	t.Log("\n" + plantest.Summary(plans))
}
