package pipeline

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// lifecycleRows lists lifecycle_outbox as "name transition binding".
func (f *fx) lifecycleRows() []string {
	f.t.Helper()
	rows, err := f.pool.Query(f.ctx, `SELECT (snapshot->>'name') || ' ' || transition || ' ' || binding_name FROM lifecycle_outbox`)
	require.NoError(f.t, err)
	var out []string
	for rows.Next() {
		var s string
		require.NoError(f.t, rows.Scan(&s))
		out = append(out, s)
	}
	require.NoError(f.t, rows.Err())
	sort.Strings(out)
	return out
}

// walkEveryTransition drives resources of kind leaf through created, synced,
// degraded, failed and deleted.
func (f *fx) walkEveryTransition() {
	f.t.Helper()
	a := f.res("leaf", "a", labels(`{"team":"a"}`))
	b := f.res("leaf", "b", labels(`{"team":"b"}`))
	f.schedule(a, b)
	f.runLeaves("leaf", func(Task) string { return `{}` })
	f.repend(a)
	r := f.claimOne("leaf").Result(nil)
	r.HealthOK = healthy(false)
	f.finish(r)
	f.set(b, `spec = '{"v":2}'`)
	f.schedule(b)
	f.finish(f.claimOne("leaf").Failure("boom", true))
	f.exec(`DELETE FROM resources WHERE id = $1`, b)
}

func TestLifecycle_NoBindingsWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.walkEveryTransition()
	require.Empty(t, f.lifecycleRows())
}

func TestLifecycle_EmitsOnePerMatchingEnabledBinding(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("other", reactWorker)
	f.exec(`INSERT INTO reactor_bindings (name, watch_kind, transition, reactor, label_match, enabled) VALUES
	    ('created-all',  'leaf',  'created',  'sink',  '{}',             true),
	    ('synced-a',     'leaf',  'synced',   'sink',  '{"team":"a"}',   true),
	    ('synced-all',   'leaf',  'synced',   'audit', '{}',             true),
	    ('degraded-all', 'leaf',  'degraded', 'sink',  '{}',             true),
	    ('failed-off',   'leaf',  'failed',   'sink',  '{}',             false),
	    ('failed-other', 'other', 'failed',   'sink',  '{}',             true),
	    ('deleted-b',    'leaf',  'deleted',  'sink',  '{"team":"b"}',   true)`)

	listener, err := f.pool.Acquire(f.ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(f.ctx, `LISTEN lifecycle_ready`)
	require.NoError(t, err)

	f.walkEveryTransition()
	require.Equal(t, []string{
		"a created created-all",
		"a degraded degraded-all",
		"a synced synced-a",
		"a synced synced-all",
		"b created created-all",
		"b deleted deleted-b",
		"b synced synced-all",
	}, f.lifecycleRows(), "disabled, other-kind and label-mismatched bindings never fire")

	var snap json.RawMessage
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT snapshot FROM lifecycle_outbox WHERE transition = 'deleted'`).Scan(&snap))
	var row struct {
		Name       string `json:"name"`
		Generation int64  `json:"generation"`
		Phase      string `json:"phase"`
	}
	require.NoError(t, json.Unmarshal(snap, &row))
	require.Equal(t, "b", row.Name, "the deleted row is snapshotted from the old row")
	require.EqualValues(t, 2, row.Generation)
	require.Equal(t, "Failed", row.Phase)

	ctx, cancel := context.WithTimeout(f.ctx, 5*time.Second)
	defer cancel()
	n, err := listener.Conn().WaitForNotification(ctx)
	require.NoError(t, err, "a direct pg_notify('lifecycle_ready') accompanies the rows")
	require.Equal(t, "lifecycle_ready", n.Channel)
}

// A binding re-pointed at another reactor while its delivery was in flight
// (claimed, so the re-point left it): the edge re-fired after goes to the
// reactor the binding names now. Re-armed under the old reactor, it would be
// dropped by the next claim (the binding no longer selects it) and the
// transition lost for the new reactor.
func TestLifecycle_AReFiredEdgeGoesToTheBindingsCurrentReactor(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.exec(`INSERT INTO reactor_bindings (name, watch_kind, transition, reactor) VALUES ('audit', 'leaf', 'synced', 'sink')`)
	a := f.res("leaf", "a", labels(`{}`))
	f.schedule(a)
	f.runLeaves("leaf", func(Task) string { return `{}` })
	require.Equal(t, []string{"a synced audit"}, f.lifecycleRows())
	f.exec(`UPDATE lifecycle_outbox SET worker_id = 'broker-1', claim_epoch = 1, heartbeat_at = now()`)
	f.exec(`UPDATE reactor_bindings SET reactor = 'audit-v2' WHERE name = 'audit'`)

	f.set(a, `status = '{"seen": 2}'`) // the row stays synced, its status changed: the edge re-fires
	var reactor string
	var claimed bool
	require.NoError(t, f.pool.QueryRow(f.ctx, `SELECT reactor, worker_id IS NOT NULL FROM lifecycle_outbox`).Scan(&reactor, &claimed))
	require.False(t, claimed, "the re-fired edge is re-armed")
	require.Equal(t, "audit-v2", reactor, "for the reactor the binding names now")
}
