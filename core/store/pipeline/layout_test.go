package pipeline

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/internal/plantest"
)

// TestDrain_StatusWriteIsHeapOnly: the drainer's status write of a batch of
// freshly composed leaves — Reconciling → Ready, status, synced_gen,
// updated_at — updates resources without a new index entry (HOT) for
// nearly every row, and moves each row's phase index entry instead. Counted
// in the drain's own transaction (pg_stat_xact_user_tables), so the figure
// is this batch's, not the cluster's. Leaves composed together share pages
// and settle in one batch, so a page must hold a new version of each of its
// rows: at the table's fillfactor 50 this batch is ~93% heap-only (80: 28%,
// 70: 35%, 60: 60%).
func TestDrain_StatusWriteIsHeapOnly(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	const n = 400
	for i := range n {
		f.res("leaf", fmt.Sprintf("team-%03d-route-%d", i/2, i%2),
			spec(fmt.Sprintf(`{"cidr":"10.%d.%d.0/24","region":"eu-west-1","target":"tgw-%d"}`, i/250, i%250, i/2)),
			labels(fmt.Sprintf(`{"team":"t%d","env":"prod"}`, i/2)))
	}
	f.exec(`SELECT schedule_eligible(array_agg(id), now()) FROM resources`)
	ts := f.claim("leaf", n)
	require.Len(t, ts, n)
	var rs []Result
	for _, tk := range ts {
		rs = append(rs, tk.Result(json.RawMessage(fmt.Sprintf(`{"route_id":"rtb-%s"}`, tk.Resource.Name))))
	}
	require.NoError(t, f.st.AppendOutbox(f.ctx, rs...))

	conn, err := f.pool.Acquire(f.ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(f.ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(f.ctx) }()
	var popped int
	require.NoError(t, tx.QueryRow(f.ctx, `SELECT drain_outbox_batch(1000, 0, 255, now())`).Scan(&popped))
	require.Equal(t, n, popped)
	var upd, hot, phaseUpd int64
	require.NoError(t, tx.QueryRow(f.ctx, `
SELECT r.n_tup_upd, r.n_tup_hot_upd, p.n_tup_upd
  FROM pg_stat_xact_user_tables r, pg_stat_xact_user_tables p
 WHERE r.relname = 'resources' AND p.relname = 'resource_phases'`).Scan(&upd, &hot, &phaseUpd))
	require.NoError(t, tx.Commit(f.ctx))
	t.Logf("resources: %d updates, %d heap-only; resource_phases: %d updates", upd, hot, phaseUpd)
	require.EqualValues(t, n, upd, "one status write per result")
	require.EqualValues(t, n, phaseUpd, "each settled row's phase index entry moves")
	require.GreaterOrEqual(t, hot, int64(n*9/10), "the status write is heap-only for nearly every row")
	require.Equal(t, n, scalar[int](f, `SELECT count(*) FROM resource_phases WHERE phase = 'Ready'`))
}

// TestPhaseIndex_FollowsEveryWrite: the phase index holds exactly one entry
// per resource, equal to the row's own phase and keys, through inserts,
// status and spec writes, freezes, deletes (the owner cascade included) and
// a TRUNCATE.
func TestPhaseIndex_FollowsEveryWrite(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)
	drift := func(step string) {
		t.Helper()
		n := scalar[int](f, `
SELECT count(*) FROM resources r FULL JOIN resource_phases p ON p.id = r.id
 WHERE r.id IS NULL OR p.id IS NULL
    OR (r.phase, r.kind, r.owner_id, r.root_id, r.shard_id, r.created_at)
       IS DISTINCT FROM (p.phase, p.kind, p.owner_id, p.root_id, p.shard_id, p.created_at)`)
		require.Zero(t, n, "%s: resources and the phase index disagree", step)
	}
	root, kids := f.composite("root", 4)
	drift("insert")
	f.runLeaves("leaf", func(Task) string { return `{"ok":true}` })
	drift("drain")
	require.Equal(t, 4, scalar[int](f, `SELECT count(*) FROM resource_phases WHERE phase = 'Ready' AND owner_id = $1`, root))
	f.set(kids[0], `spec = '{"v":2}'`)
	f.set(kids[1], `frozen_until = 'infinity'`)
	f.set(kids[2], `deletion_requested_at = now()`)
	f.set(kids[3], `failure_gen = generation`)
	drift("spec, freeze, delete request, failure")
	require.Equal(t, []string{"Deleting", "Failed", "Quarantined", "Reconciling"},
		scalar[[]string](f, `SELECT array_agg(phase ORDER BY phase) FROM resource_phases WHERE owner_id = $1`, root))
	f.exec(`DELETE FROM resources WHERE id = $1`, root) // the children go by the owner FK's cascade
	drift("delete with cascade")
	require.Zero(t, scalar[int](f, `SELECT count(*) FROM resource_phases`))
	f.res("leaf", "again")
	f.exec(`TRUNCATE resources CASCADE`)
	drift("truncate")
}

// TestLabels_UpdateReplacesEntriesByPrimaryKey: a label edit replaces the
// row's resource_labels entries, each old one deleted by its primary key,
// never by a scan of the table — checked before the table has statistics,
// with enough rows that a scan would be the planner's loss.
func TestLabels_UpdateReplacesEntriesByPrimaryKey(t *testing.T) {
	t.Parallel()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.exec(`INSERT INTO resources (kind, version, name, labels, shard_id)
	        SELECT 'leaf', 'v1', 'l-' || g, jsonb_build_object('team', 't' || g % 50, 'env', 'prod'), g % 256
	          FROM generate_series(1, 5000) g`)
	id := f.res("leaf", "edited", labels(`{"team":"a","env":"dev"}`))
	rec := &plantest.Recorder{}
	pool := plantest.Pool(t, f.pool.Config(), rec)
	_, err := pool.Exec(f.ctx, `UPDATE resources SET labels = '{"team":"b","tier":"gold"}' WHERE id = $1`, id)
	require.NoError(t, err)
	require.Equal(t, []string{"team=b", "tier=gold"},
		scalar[[]string](f, `SELECT array_agg(key || '=' || value ORDER BY key) FROM resource_labels WHERE resource_id = $1`, id))
	for _, p := range rec.Take(t) {
		if !strings.Contains(p.Query, "DELETE FROM resource_labels") {
			continue
		}
		for _, sc := range p.Scans() {
			require.NotEqual(t, "Seq Scan", sc.Type, "label delete: %s", p)
		}
		require.Contains(t, p.String(), "resource_labels_pkey", "label delete by primary key")
	}
}
