package control

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/db/pgtest"
)

// TestDrainer_EveryCommittedDrainThatScheduledWorkIsFollowedByANotify holds
// notify_gated's work_ready window shut for the whole test, as if every
// drain lost the gate to a drain that committed earlier, and checks that each
// drain that pended the next link of a chain is still followed, after its
// commit, by a work_ready NOTIFY on a LISTEN connection: the drainer's own.
func TestDrainer_EveryCommittedDrainThatScheduledWorkIsFollowedByANotify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.URL(t)
	pool := pgtest.PoolFor(t, url)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err, sql)
	}
	exec(`INSERT INTO kind_manifest (kind, version, manifest) VALUES ('link', 'v1',
	      '{"kind":"link","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}')`)
	const links = 4
	ids := make([]uuid.UUID, links)
	for i := range ids {
		ids[i] = uuid.New()
		exec(`INSERT INTO resources (id, kind, version, name, spec, labels, shard_id)
		      VALUES ($1, 'link', 'v1', $2, '{}', '{}', shard_of($1))`, ids[i], "l"+string(rune('a'+i)))
		if i > 0 {
			exec(`INSERT INTO resource_deps (dependent_id, dependency_id, value_flows) VALUES ($1, $2, '[]')`, ids[i], ids[i-1])
		}
	}
	// The gate's window is shut from here on: every gated work_ready is
	// suppressed, including the one inside each drain.
	exec(`INSERT INTO wake_state (channel, last_notified_at) VALUES ('work_ready', now() + interval '1 day')
	      ON CONFLICT (channel) DO UPDATE SET last_notified_at = EXCLUDED.last_notified_at`)
	st := pipeline.New(pool)
	n, err := st.ScheduleEligible(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the chain's head is eligible")

	listen, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = listen.Close(context.Background()) })
	_, err = listen.Exec(ctx, `LISTEN work_ready`)
	require.NoError(t, err)

	d := &Drainer{Pipeline: st, Shards: allShards(), Log: zerolog.Nop(), Failsafe: 50 * time.Millisecond}
	d.TestSignals.Init()
	runService(t, d)

	lease := pipeline.Lease{WorkerID: "w", Lo: 0, Hi: 255}
	for i := range links {
		ts, err := st.Claim(ctx, lease, pipeline.Batch{Kind: "link", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 10})
		require.NoError(t, err)
		require.Len(t, ts, 1, "link %d: exactly the next link is pending", i)
		require.Equal(t, ids[i], ts[0].Key.ResourceID)
		require.NoError(t, st.AppendOutbox(ctx, ts[0].Result(json.RawMessage(`{"ok":true}`))))

		// Until the lane that applied it committed.
		for n := 0; n == 0; {
			n = d.TestSignals.Drained.WaitOrTimeout(t).Drained
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		note, err := listen.WaitForNotification(wctx)
		cancel()
		require.NoError(t, err, "link %d: the committed drain was not followed by a work_ready NOTIFY", i)
		require.Equal(t, "work_ready", note.Channel)
		require.NoError(t, d.TestSignals.NotifiedWorkReady.WaitOrTimeout(t))
	}
	var left int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM work_queue`).Scan(&left))
	require.Zero(t, left, "the last link's drain pended nothing more")
}
