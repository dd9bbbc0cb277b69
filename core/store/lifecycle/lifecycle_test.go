package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/lifecycle"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Release frees exactly the deliveries named, each fenced on its claim
// epoch and on its claimer, and wakes the reactor dispatchers.
func TestRelease_FreesTheNamedClaimsAndWakesTheDispatchers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.PoolFor(t, url)
	type row struct {
		id     uuid.UUID
		shard  int
		worker string
		epoch  int64
	}
	ours := row{uuid.New(), 3, "broker-1", 11}
	ours2 := row{uuid.New(), 200, "broker-1", 12}
	reclaimed := row{uuid.New(), 3, "broker-1", 13}   // named with an older epoch below: re-claimed since
	someoneElse := row{uuid.New(), 3, "broker-2", 14} // named, but another broker's claim
	_, err := pool.Exec(ctx, `INSERT INTO reactor_bindings (name, watch_kind, transition, reactor) VALUES ('audit', 'vpc', 'synced', 'sink')`)
	require.NoError(t, err)
	for _, r := range []row{ours, ours2, reclaimed, someoneElse} {
		_, err := pool.Exec(ctx, `
INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot,
                              worker_id, claim_epoch, heartbeat_at)
VALUES ($1, 'synced', 1, 'audit', $2, 'sink', 'vpc', '{}', $3, $4, now())`, r.id, r.shard, r.worker, r.epoch)
		require.NoError(t, err)
	}
	listener, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = listener.Close(context.Background()) })
	_, err = listener.Exec(ctx, "LISTEN lifecycle_ready")
	require.NoError(t, err)

	named := func(r row, epoch int64) lifecycle.Delivery {
		return lifecycle.Delivery{Key: lifecycle.Key{ResourceID: r.id, Transition: "synced", Generation: 1, Binding: "audit",
			ShardID: r.shard}, ClaimEpoch: epoch}
	}
	n, err := lifecycle.New(pool).Release(ctx, "broker-1",
		[]lifecycle.Delivery{named(ours, 11), named(ours2, 12), named(reclaimed, 9), named(someoneElse, 14)})
	require.NoError(t, err)
	require.Equal(t, 2, n)

	claimed := map[uuid.UUID]bool{}
	rows, err := pool.Query(ctx, `SELECT resource_id, worker_id IS NOT NULL AND claim_epoch IS NOT NULL FROM lifecycle_outbox`)
	require.NoError(t, err)
	for rows.Next() {
		var id uuid.UUID
		var c bool
		require.NoError(t, rows.Scan(&id, &c))
		claimed[id] = c
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[uuid.UUID]bool{ours.id: false, ours2.id: false, reclaimed.id: true, someoneElse.id: true}, claimed)

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	note, err := listener.WaitForNotification(wctx)
	require.NoError(t, err, "the dispatchers are woken")
	require.Equal(t, "lifecycle_ready", note.Channel)

	n, err = lifecycle.New(pool).Release(ctx, "broker-1", []lifecycle.Delivery{named(ours, 11)})
	require.NoError(t, err)
	require.Zero(t, n, "a released claim is not released twice")
}

// A claim drops the rows of a binding disabled after they were written (the
// disable deletes its backlog, but a transition committing beside it, or a
// claim lapsing after it, leaves such rows), and claims the live rows behind
// them in the same call, however many stragglers come first.
func TestClaim_DropsADisabledBindingsStragglersAndClaimsWhatFollows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.URL(t))
	_, err := pool.Exec(ctx, `
INSERT INTO reactor_bindings (name, watch_kind, transition, reactor, enabled)
VALUES ('audit', 'vpc', 'synced', 'sink', true), ('old', 'vpc', 'synced', 'sink', false);
INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot, created_at)
SELECT gen_random_uuid(), 'synced', 1, CASE WHEN g <= 120 THEN 'old' ELSE 'audit' END, g % 256, 'sink', 'vpc', '{}',
       now() - (200 - g) * interval '1 second'
  FROM generate_series(1, 130) g`)
	require.NoError(t, err)

	ds, err := lifecycle.New(pool).Claim(ctx, "broker-1", []string{"sink"}, 0, 255, 50)
	require.NoError(t, err)
	require.Len(t, ds, 10, "the live rows behind 120 stragglers, in one call")
	for _, d := range ds {
		require.Equal(t, "audit", d.Key.Binding)
		require.NotZero(t, d.ClaimEpoch)
		require.JSONEq(t, `{}`, string(d.Snapshot))
	}
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM lifecycle_outbox WHERE binding_name = 'old'`).Scan(&left))
	require.Zero(t, left, "the stragglers are deleted, not delivered")

	ds, err = lifecycle.New(pool).Claim(ctx, "broker-1", []string{"sink"}, 0, 255, 50)
	require.NoError(t, err)
	require.Empty(t, ds)
}

// A binding re-pointed after its rows were written (another reactor, watched
// kind, transition or label selector) no longer subscribes what they carry:
// a claim drops them rather than deliver the old subscription's backlog to
// the reactor it no longer names, and delivers what the binding selects now.
func TestClaim_DropsTheRowsABindingNoLongerSelects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.URL(t))
	_, err := pool.Exec(ctx, `
INSERT INTO reactor_bindings (name, watch_kind, transition, reactor, label_match, enabled)
VALUES ('audit', 'vpc', 'synced', 'sink', '{"team": "a"}', true);
INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
VALUES (gen_random_uuid(), 'synced', 1, 'audit', 1, 'other', 'vpc', '{"labels": {"team": "a"}}'),
       (gen_random_uuid(), 'synced', 1, 'audit', 2, 'sink', 'subnet', '{"labels": {"team": "a"}}'),
       (gen_random_uuid(), 'failed', 1, 'audit', 3, 'sink', 'vpc', '{"labels": {"team": "a"}}'),
       (gen_random_uuid(), 'synced', 1, 'audit', 4, 'sink', 'vpc', '{"labels": {"team": "b"}}'),
       (gen_random_uuid(), 'synced', 1, 'audit', 5, 'sink', 'vpc', '{"labels": {"team": "a", "x": "y"}}')`)
	require.NoError(t, err)

	ds, err := lifecycle.New(pool).Claim(ctx, "broker-1", []string{"sink", "other"}, 0, 255, 50)
	require.NoError(t, err)
	require.Len(t, ds, 1, "only the row the binding still selects is delivered")
	require.Equal(t, 5, ds[0].Key.ShardID)
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM lifecycle_outbox WHERE worker_id IS NULL`).Scan(&left))
	require.Zero(t, left, "the rows the binding no longer selects are deleted, not left pending")
}
