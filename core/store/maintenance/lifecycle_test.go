package maintenance_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/lifecycle"
)

func TestReapStaleLifecycle_ReArmsOnlyLapsedClaims(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const stale = time.Minute
	insert := func(binding string, shard int, worker string, heartbeat time.Time) {
		var w, hb any
		if worker != "" {
			w, hb = worker, heartbeat
		}
		f.exec(`INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor,
		                                      watch_kind, snapshot, worker_id, claim_epoch, heartbeat_at)
		        VALUES ('00000000-0000-0000-0000-000000000001', 'synced', 1, lower($1), $2, 'sink', 'bom', '{}', $3, 7, $4)`,
			binding, shard, w, hb)
	}
	cases := map[string]struct {
		reason  string
		shard   int
		worker  string
		beat    time.Time
		wantArm bool
	}{
		"Lapsed":         {reason: "the dispatcher stopped beating: deliver again", shard: 2, worker: "d1", beat: t0.Add(-2 * stale), wantArm: true},
		"SiblingLive":    {reason: "a co-bound sibling's live claim on the same transition is untouched", shard: 2, worker: "d2", beat: t0.Add(-stale / 2)},
		"Unclaimed":      {reason: "nothing to re-arm", shard: 3},
		"OutsideRange":   {reason: "another reaper's shard", shard: 99, worker: "d3", beat: t0.Add(-2 * stale)},
		"NeverHeartbeat": {reason: "a claim that never beat counts as lapsed", shard: 4, worker: "d4", wantArm: true},
	}
	for name, tc := range cases {
		insert(name, tc.shard, tc.worker, tc.beat)
		f.exec(`INSERT INTO reactor_bindings (name, watch_kind, transition, reactor) VALUES (lower($1), 'bom', 'synced', 'sink')`, name)
	}
	conn, err := f.db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `LISTEN lifecycle_ready`)
	require.NoError(t, err)

	n, err := f.at(t0).ReapStaleLifecycle(ctx, shard.Between(0, 15), stale)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	for name, tc := range cases {
		var claimed bool
		require.NoError(t, f.db.QueryRow(ctx, `SELECT worker_id IS NOT NULL FROM lifecycle_outbox WHERE binding_name = lower($1)`,
			name).Scan(&claimed))
		require.Equal(t, tc.worker != "" && !tc.wantArm, claimed, "%s: %s", name, tc.reason)
	}
	wctx, cancel := contextWithTimeout(2 * time.Second)
	defer cancel()
	note, err := conn.Conn().WaitForNotification(wctx)
	require.NoError(t, err, "re-arming wakes the reactor dispatchers")
	require.Equal(t, "lifecycle_ready", note.Channel)
}

// A delivery claimed before its binding was re-pointed at another reactor
// (or disabled, or deleted) and never acknowledged is no longer the
// binding's: whichever way its claim ends without an ack — it lapses (the
// reaper), its member dies (free_dead_member_leases) or its broker gives it
// back (Release) — it is dropped, as the re-point dropped the pending ones,
// not re-armed under the reactor the binding left, where no dispatcher may
// ever claim it again. A delivery the binding still selects is re-armed.
func TestReArm_DropsADeliveryItsBindingNoLongerSelects(t *testing.T) {
	t.Parallel()
	type path struct {
		reason string
		rearm  func(f *fixture, ds []lifecycle.Delivery) error
	}
	paths := map[string]path{
		"Lapsed": {"the dispatcher stopped beating", func(f *fixture, _ []lifecycle.Delivery) error {
			_, err := f.at(t0).ReapStaleLifecycle(ctx, shard.Between(0, 255), time.Minute)
			return err
		}},
		"MemberGone": {"the dispatcher's member was removed", func(f *fixture, _ []lifecycle.Delivery) error {
			_, err := f.db.Exec(ctx, `SELECT free_dead_member_leases(ARRAY['d1'])`)
			return err
		}},
		"Released": {"the dispatcher's broker is shutting down", func(f *fixture, ds []lifecycle.Delivery) error {
			_, err := lifecycle.New(f.db).Release(ctx, "d1", ds)
			return err
		}},
	}
	for name, p := range paths {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.exec(`INSERT INTO reactor_bindings (name, watch_kind, transition, reactor, enabled)
			        VALUES ('moved', 'vpc', 'synced', 'sink', true), ('off', 'vpc', 'synced', 'sink', true),
			               ('gone', 'vpc', 'synced', 'sink', true), ('stays', 'vpc', 'synced', 'sink', true)`)
			var ds []lifecycle.Delivery
			for i, b := range []string{"moved", "off", "gone", "stays"} {
				var d lifecycle.Delivery
				d.Key = lifecycle.Key{ResourceID: uuid.New(), Transition: "synced", Generation: 1, Binding: b, ShardID: i}
				require.NoError(t, f.db.QueryRow(ctx, `
INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot,
                              worker_id, claim_epoch, heartbeat_at)
VALUES ($1, 'synced', 1, $2, $3, 'sink', 'vpc', '{}', 'd1', nextval('claim_epoch_seq'), $4)
RETURNING claim_epoch`, d.Key.ResourceID, b, i, t0.Add(-time.Hour)).Scan(&d.ClaimEpoch))
				ds = append(ds, d)
			}
			// While the deliveries are in flight: one binding is re-pointed
			// at another reactor, one disabled, one deleted.
			f.exec(`UPDATE reactor_bindings SET reactor = 'sink2' WHERE name = 'moved'`)
			f.exec(`UPDATE reactor_bindings SET enabled = false WHERE name = 'off'`)
			f.exec(`DELETE FROM reactor_bindings WHERE name = 'gone'`)

			require.NoError(t, p.rearm(f, ds), p.reason)
			rows, err := f.db.Query(ctx, `SELECT binding_name || ' ' || reactor || ' ' || (worker_id IS NULL)::text
			                                FROM lifecycle_outbox ORDER BY binding_name`)
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			require.Equal(t, []string{"stays sink true"}, got, "%s: only the delivery its binding still selects is re-armed", p.reason)
		})
	}
}
