package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
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
		        VALUES ('00000000-0000-0000-0000-000000000001', 'synced', 1, $1, $2, 'sink', 'bom', '{}', $3, 7, $4)`,
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
		require.NoError(t, f.db.QueryRow(ctx, `SELECT worker_id IS NOT NULL FROM lifecycle_outbox WHERE binding_name = $1`,
			name).Scan(&claimed))
		require.Equal(t, tc.worker != "" && !tc.wantArm, claimed, "%s: %s", name, tc.reason)
	}
	wctx, cancel := contextWithTimeout(2 * time.Second)
	defer cancel()
	note, err := conn.Conn().WaitForNotification(wctx)
	require.NoError(t, err, "re-arming wakes the reactor dispatchers")
	require.Equal(t, "lifecycle_ready", note.Channel)
}
