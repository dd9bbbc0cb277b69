package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/internal/plantest"
	"github.com/converge-run/converge/core/store/membership"
)

// The hot statements' plans, pinned at the fixture's 10k rows, at 1M-row
// statistics and after a bulk load the statistics have not seen. Every plan
// is recorded through auto_explain (nested plpgsql statements included):
// none may Seq Scan resources, the queue or the outbox, and a shard range
// within one partition touches at most two.

var (
	planHot   = []string{"resources", "resource_phases", "resource_labels", "work_queue", "work_outbox", "resource_deps"}
	planParts = []string{"work_queue", "work_outbox"}
)

// planFx loads 100 composite roots of 99 leaves each (10k rows): 40% of
// the leaves reconciling and queued, a tenth of those leased with a result
// waiting in the outbox. Every row lives in shards 0-15 (queue partition 0),
// as one broker's range sees its partition: a few thousand queue rows, not
// the handful a 10k fleet spread over 16 partitions would leave, so a seq
// scan of the partition is never the cheap plan it is on a toy table.
// stats is how the planner sees the tables: "analyzed", "1M" (inflated), "bulk" (analyzed before the load) or
// "emptied" (the queue and outbox analyzed while their rows were all dead).
func planFx(t *testing.T, stats string) (*fx, *plantest.Recorder, *Store) {
	t.Helper()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)
	if stats == "bulk" {
		f.exec(`ANALYZE`)
	}
	loadPlanFixture(f)
	switch stats {
	case "analyzed":
		f.exec(`ANALYZE`)
	case "1M":
		f.exec(`ANALYZE`)
		plantest.Inflate(t, f.pool, 100, planHot...)
	case "emptied":
		f.exec(`ANALYZE`)
		plantest.AnalyzeEmptied(t, f.pool, "work_queue", "work_outbox")
	case "emptied fleet":
		f.exec(`ANALYZE`)
		plantest.AnalyzeEmptied(t, f.pool, planHot...)
	}
	rec := &plantest.Recorder{}
	st := New(plantest.Pool(t, f.pool.Config(), rec))
	return f, rec, st
}

// emptyPlanFx is planFx's schema with empty tables, analyzed: the
// statistics of a fresh install's first minutes, from which a session's
// first plans are made. The caller loads the rows (loadPlanFixture) when
// those plans are made.
func emptyPlanFx(t *testing.T) (*fx, *plantest.Recorder) {
	t.Helper()
	f := newFx(t)
	f.kind("leaf", reactWorker)
	f.kind("comp", reactComposite)
	f.exec(`ANALYZE`)
	return f, &plantest.Recorder{}
}

// recordedSession is one connection to f's database whose plans rec
// records: every call on it runs in one session, with the plans it keeps.
func recordedSession(t *testing.T, f *fx, rec *plantest.Recorder) *pgxpool.Conn {
	t.Helper()
	conn, err := plantest.Session(t, f.pool.Config(), rec).Acquire(context.Background())
	require.NoError(t, err)
	t.Cleanup(conn.Release)
	return conn
}

// loadPlanFixture writes planFx's rows.
func loadPlanFixture(f *fx) {
	f.exec(`
INSERT INTO resources (id, kind, version, name, shard_id, created_at)
SELECT id, 'comp', 'v1', 'root-' || g, shard_of(id) & 15, now() - g * interval '1 minute'
  FROM (SELECT gen_random_uuid() AS id, g FROM generate_series(1, 100) g) x`)
	f.exec(`
INSERT INTO resources (id, kind, version, name, labels, owner_id, root_id, shard_id, synced_gen, composed_gen, status, created_at)
SELECT c.id, 'leaf', 'v1', r.name || '-leaf-' || g, jsonb_build_object('tier', 't' || g % 10), r.id, r.id, shard_of(c.id) & 15,
       CASE WHEN g % 5 < 2 THEN 0 ELSE 1 END, 1, '{"net_id":"n"}', r.created_at + g * interval '1 second'
  FROM resources r CROSS JOIN LATERAL (SELECT gen_random_uuid() AS id, g FROM generate_series(1, 99) g) c
 WHERE r.kind = 'comp'`)
	f.exec(`
INSERT INTO resource_deps (dependent_id, dependency_id, value_flows)
SELECT c.id, u.id, '[{"src_field":"/net_id","dep_field":"/net_id"}]'
  FROM resources c JOIN resources u ON u.owner_id = c.owner_id AND u.name = replace(c.name, '-leaf-', '-leaf-1')
 WHERE c.kind = 'leaf' AND c.name LIKE '%-leaf-_'`)
	f.exec(`
INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, not_before, worker_id, claim_epoch, leased_at, heartbeat_at)
SELECT id, 'reconcile', shard_id, kind, version, generation, now() - interval '1 minute',
       CASE WHEN n % 10 = 0 THEN 'w-old' END, CASE WHEN n % 10 = 0 THEN n END,
       CASE WHEN n % 10 = 0 THEN now() END, CASE WHEN n % 10 = 0 THEN now() END
  FROM (SELECT r.*, row_number() OVER () AS n FROM resources r WHERE r.kind = 'leaf' AND r.synced_gen < r.generation) x`)
	f.exec(`
INSERT INTO work_outbox (shard_id, resource_id, task_type, claim_epoch, generation, status, health_ok)
SELECT shard_id, resource_id, task_type, claim_epoch, generation, '{"net_id":"n2"}', true
  FROM work_queue WHERE worker_id IS NOT NULL`)
}

// TestPlans_RollupGatePlannedOnAnEmptyTable: the gate's generic plan is
// made once per session, from the statistics of that moment. A session
// whose first call came on a fresh install's empty tables (the first drained
// batch) keeps that plan while the tables grow until an ANALYZE replaces it,
// so the plan made on the empty table must already be the index probe.
func TestPlans_RollupGatePlannedOnAnEmptyTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, rec := emptyPlanFx(t)
	conn := recordedSession(t, f, rec)
	require.Equal(t, 0, gateAsDrain(t, conn, "00000000-0000-0000-0000-000000000001", true), "nothing unsettled under an unknown root")
	rec.Take(t)

	loadPlanFixture(f)
	rows, err := f.pool.Query(ctx, `SELECT id::text FROM resources WHERE kind = 'comp' ORDER BY name LIMIT 3`)
	require.NoError(t, err)
	roots, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, root := range roots {
		require.Equal(t, 1, gateAsDrain(t, conn, root, true), "40% of the root's leaves reconcile and none is in flight")
	}
	plans := rec.Take(t)
	require.Equal(t, len(roots), genericGateProbes(t, plans), "one probe of the unsettled index a call\n%s", plantest.Summary(plans))
	t.Log("\n" + plantest.Summary(plans))
}

// TestPlans_ScheduleGatePlannedOnEmptyTables: schedule_eligible's plan is
// cached per session too, and outside a drain (whose force_custom_plan
// replans each call) the session keeps a generic plan once five calls have
// cost no less than it — as they do on the empty tables of a fresh install,
// where a compose's first calls come. A bulk apply then grows the edges by
// hundreds of thousands of rows before autovacuum's first ANALYZE replaces
// the plan, so the plan made on the empty tables must already probe the
// edges' and resources' keys. (Before it was pinned, a 100k run's composes
// scanned resource_deps 4,060 times, 115M rows read, one scan per candidate.)
func TestPlans_ScheduleGatePlannedOnEmptyTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, rec := emptyPlanFx(t)
	conn := recordedSession(t, f, rec)
	// The plan such a session keeps, made at once rather than after five
	// calls.
	_, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)
	var queued int
	require.NoError(t, conn.QueryRow(ctx, `SELECT schedule_eligible(ARRAY[gen_random_uuid()])`).Scan(&queued))
	require.Zero(t, queued, "an unknown id queues nothing")
	rec.Take(t)

	loadPlanFixture(f)
	// Dependents whose upstream has not synced, not yet queued: each one's
	// edges and upstream are probed, and none is queued.
	f.exec(`DELETE FROM work_queue w USING resource_deps d WHERE w.resource_id = d.dependent_id`)
	f.exec(`UPDATE resources r SET synced_gen = 0 FROM resource_deps d WHERE r.id = d.dependency_id`)
	var deps []string
	require.NoError(t, f.pool.QueryRow(ctx, `
SELECT array_agg(d.id::text) FROM (SELECT DISTINCT dependent_id AS id FROM resource_deps LIMIT 50) d`).Scan(&deps))
	require.Len(t, deps, 50)
	require.NoError(t, conn.QueryRow(ctx, `SELECT schedule_eligible($1::uuid[])`, deps).Scan(&queued))
	require.Zero(t, queued, "every upstream is still reconciling")
	plans := rec.Take(t)
	plantest.Check(t, plans, plantest.Spec{Hot: planHot, Parts: planParts, Rules: []plantest.Rule{
		{Match: "WITH cand AS MATERIALIZED", Uses: []string{"resources_pkey", "resource_deps_pkey"}},
	}})
	t.Log("\n" + plantest.Summary(plans))
}

// TestPlans_BrokerSessionPlannedOnEmptyTables: a broker's sessions start
// on a fresh install's empty tables, and each keeps the generic plans it
// made there — the claimable probes' by their own setting, every other
// statement once five calls cost no less — until an ANALYZE of the table
// replaces them, a minute or more into a bulk apply (and an ANALYZE of a
// queue drained empty makes them again, on an empty table). So one session
// claims, composes and drains six roots on near-empty tables, the 10k
// fixture is loaded with no ANALYZE after it, and the same session's next
// claims (over two partitions too, where the claimable probe runs first),
// compose and drain must still probe by key: no Seq Scan of a table that
// grows with the fleet, whatever its size (no small-table allowance here:
// a kept plan does not follow the table's growth). Until the claims over two
// partitions were added, the probes' kept plans went unchecked, and they
// sorted each partition read whole.
func TestPlans_BrokerSessionPlannedOnEmptyTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f, rec := emptyPlanFx(t)
	f.kind("early", reactComposite) // the roots composed before the load (the fixture gives every comp root leaves)
	st := New(plantest.Session(t, f.pool.Config(), rec))
	leaves := Batch{Kind: "leaf", Version: "v1", TaskType: TaskReconcile, Max: 50}
	rollups := Batch{Kind: "comp", Version: "v1", TaskType: TaskReconcile, Max: 10, OnlyRollups: true}
	// compose claims a root of kind and composes children leaves, each
	// after the first waiting on the first, the last also on external (if
	// set).
	compose := func(kind string, children int, external string) {
		t.Helper()
		ts, err := st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, Batch{Kind: kind, Version: "v1", TaskType: TaskReconcile, Max: 1})
		require.NoError(t, err)
		require.Len(t, ts, 1)
		name := ts[0].Resource.Name
		c := Composition{}
		for i := 1; i <= children; i++ {
			c.Children = append(c.Children, Child{Kind: "leaf", Name: fmt.Sprintf("%s-leaf-%d", name, i)})
			if i > 1 {
				c.Edges = append(c.Edges, Edge{Dependent: fmt.Sprintf("%s-leaf-%d", name, i), Dependency: Ref{Child: name + "-leaf-1"}})
			}
		}
		if external != "" {
			c.Edges = append(c.Edges, Edge{Dependent: fmt.Sprintf("%s-leaf-%d", name, children), Dependency: Ref{Kind: "leaf", Name: external}})
		}
		_, err = st.ApplyCompose(ctx, ts[0], c)
		require.NoError(t, err)
	}
	// finish reports each task's result and drains them, with their
	// cascade, the value flows to their dependents and the phase rows.
	finish := func(ts []Task) {
		t.Helper()
		finishTasks(t, st, ts, `{"net_id":"n3"}`)
	}
	// leased does what a broker does with claimed leaf tasks before their
	// results: heartbeats them, adopts them (a worker's resumed session),
	// counts a lost attempt of one, reads the outbox's lag, and releases the
	// last (it is claimed again later). It returns the tasks left to finish.
	leased := func(ts []Task) []Task {
		t.Helper()
		require.GreaterOrEqual(t, len(ts), 2)
		keys, held := leaseKeys(ts)
		n, err := st.Heartbeat(ctx, "w", 0, 15, keys)
		require.NoError(t, err)
		require.Equal(t, len(ts), n)
		adopted, err := st.Adopt(ctx, "w", held)
		require.NoError(t, err)
		require.Len(t, adopted, len(ts))
		_, _, _, err = st.RecordLostAttempt(ctx, ts[0])
		require.NoError(t, err)
		_, err = st.OutboxLag(ctx, 0, 15)
		require.NoError(t, err)
		n, err = st.Release(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, keys[len(ts)-1:])
		require.NoError(t, err)
		require.Equal(t, 1, n)
		return ts[:len(ts)-1]
	}
	// acrossPartitions claims over two partitions' shards, as a broker whose
	// range spans partitions does: the claimable-partitions probe first
	// (claimable_spans, and claimable_rollup_spans for rollups only), with
	// its generic plan cached for the session. Delete tasks, of which there
	// are none: the probes read, nothing is leased.
	acrossPartitions := func() {
		t.Helper()
		for _, b := range []Batch{
			{Kind: "leaf", Version: "v1", TaskType: TaskDelete, Max: 10},
			{Kind: "comp", Version: "v1", TaskType: TaskDelete, Max: 10, OnlyRollups: true},
		} {
			ts, err := st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 31}, b)
			require.NoError(t, err)
			require.Empty(t, ts)
		}
	}
	for i := range plantest.KeptPlanCalls {
		f.exec(`
INSERT INTO resources (id, kind, version, name, shard_id) SELECT id, 'early', 'v1', $1, shard_of(id) & 15 FROM (SELECT gen_random_uuid() AS id) x`,
			fmt.Sprintf("early-%d", i))
		f.exec(`INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation)
SELECT id, 'reconcile', shard_id, kind, version, generation FROM resources WHERE name = $1`, fmt.Sprintf("early-%d", i))
		compose("early", 3, "")
		ts, err := st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, leaves)
		require.NoError(t, err)
		finish(ts)
		f.exec(`
WITH r AS (
    INSERT INTO resources (id, kind, version, name, shard_id)
    SELECT id, 'leaf', 'v1', $1 || g, shard_of(id) & 15 FROM (SELECT gen_random_uuid() AS id, g FROM generate_series(1, 2) g) x
    RETURNING id, shard_id, kind, version, generation
)
INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation)
SELECT id, 'reconcile', shard_id, kind, version, generation FROM r`, fmt.Sprintf("solo-%d-", i))
		ts, err = st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, leaves)
		require.NoError(t, err)
		finish(leased(ts))
		_, err = st.Claimable(ctx, 0, 15, []Batch{{Kind: "leaf", Version: "v1", TaskType: TaskReconcile}})
		require.NoError(t, err)
		_, err = st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, rollups)
		require.NoError(t, err)
		acrossPartitions()
	}
	rec.Take(t)

	f.exec(`DELETE FROM work_queue`) // the fixture queues every reconciling leaf, the early ones too
	loadPlanFixture(f)
	f.exec(`INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation)
SELECT id, 'reconcile', shard_id, kind, version, generation FROM resources WHERE kind = 'comp'
ON CONFLICT DO NOTHING`)
	ts, err := st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, leaves)
	require.NoError(t, err)
	require.NotEmpty(t, ts, "the fixture queues leaves")
	finish(leased(ts))
	has, err := st.Claimable(ctx, 0, 15, []Batch{{Kind: "leaf", Version: "v1", TaskType: TaskReconcile}})
	require.NoError(t, err)
	require.Equal(t, []bool{true}, has)
	_, err = st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, rollups)
	require.NoError(t, err)
	compose("comp", 120, "root-9-leaf-3")
	acrossPartitions()
	plans := rec.Take(t)
	plantest.Check(t, plans, plantest.Spec{Hot: planHot, Parts: planParts, Rules: []plantest.Rule{
		{Match: "WITH settled AS", Uses: []string{"work_queue_kind_version_task_type_not_before_idx"}},
		{Match: "WITH upd AS", Uses: []string{"resources_pkey"}},
		{Match: "unnest(p_kinds, p_versions, p_task_types)", Uses: []string{"work_queue_kind_version_task_type_not_before_idx"}},
		{Match: "WITH cand AS MATERIALIZED", Uses: []string{"resources_pkey", "resource_deps_pkey"}},
		{Match: "UPDATE resource_phases s", Uses: []string{"resource_phases_pkey"}},
	}})
	t.Log("\n" + plantest.Summary(plans))
}

// leaseKeys is ts's keys, and their leases as a worker reports them.
func leaseKeys(ts []Task) ([]TaskKey, []Held) {
	keys := make([]TaskKey, len(ts))
	held := make([]Held, len(ts))
	for i, task := range ts {
		keys[i], held[i] = task.Key, Held{Key: task.Key, Epoch: task.ClaimEpoch}
	}
	return keys, held
}

// updatesByTID asserts that the recorded statements matching match update
// the rows of relation (a table, or a partitioned table's partitions) by
// TID alone: each update of it is fed by a Tid Scan, never by an index or a
// scan of the table. The queue's stamps, because an index or a scan read
// every row of a partition whose statistics make it look empty (the rows
// are found and locked before, by key or by the claim's ordered walk); the
// drain's updates of resources, because the rows were just read by key in
// the same statement, and a second probe of the key was a second descent
// of the primary key a row.
func updatesByTID(t *testing.T, plans []plantest.Plan, match, relation string) {
	t.Helper()
	stamps := 0
	for _, p := range plans {
		if !strings.Contains(p.Query, match) {
			continue
		}
		var feed func(n plantest.Node)
		feed = func(n plantest.Node) {
			if strings.HasPrefix(n.Relation, relation) && n.Type != "Tid Scan" {
				t.Errorf("an update of %s reads it by %s on %s, want a Tid Scan\n%s", relation, n.Type, n.Relation, p)
			}
			for _, c := range n.Plans {
				if c.Parent != "InitPlan" && c.Parent != "SubPlan" {
					feed(c)
				}
			}
		}
		p.Plan.Walk(func(n plantest.Node) {
			if n.Type != "ModifyTable" || !strings.HasPrefix(n.Relation, relation) {
				return
			}
			stamps++
			for _, c := range n.Plans {
				if c.Parent == "Outer" {
					feed(c)
				}
			}
		})
	}
	require.Positive(t, stamps, "no update of %s recorded for %q", relation, match)
}

// finishTasks reports each task's result with status and drains shards
// 0-15 until no result is left: the results applied with their cascades,
// value flows and phase rows (and a delete's teardown of the layer above).
func finishTasks(t *testing.T, st *Store, ts []Task, status string) {
	t.Helper()
	ctx := context.Background()
	var results []Result
	for _, task := range ts {
		results = append(results, task.Result(json.RawMessage(status)))
	}
	require.NoError(t, st.AppendOutbox(ctx, results...))
	for {
		n, err := st.DrainOutboxBatch(ctx, 1000, 0, 15)
		require.NoError(t, err)
		if n == 0 {
			return
		}
	}
}

// gateAsDrain calls rollup_gate as the drain's cascade does: under the
// drain's force_custom_plan.
func gateAsDrain(t *testing.T, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, root string, top bool) int {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SET LOCAL plan_cache_mode = force_custom_plan`)
	require.NoError(t, err)
	var g int
	require.NoError(t, tx.QueryRow(ctx, `SELECT rollup_gate($1::uuid, $2, 0)`, root, top).Scan(&g))
	require.NoError(t, tx.Commit(ctx))
	return g
}

// genericGateProbes checks the rollup gate's probes among plans and counts
// them: each reads the unsettled index, never a Seq Scan, on the gate's
// generic plan (its SET plan_cache_mode), whose condition names the root as
// a parameter where a plan made for the call would carry the root's uuid.
func genericGateProbes(t *testing.T, plans []plantest.Plan) int {
	t.Helper()
	probes := 0
	for _, p := range plans {
		if !strings.Contains(p.Query, "FROM resource_phases d") {
			continue
		}
		p.Plan.Walk(func(n plantest.Node) {
			require.NotEqual(t, "Seq Scan", n.Type, "the gate's probe scans the phase index\n%s", p.String())
			if strings.Contains(n.IndexCond, "root_id") {
				probes++
				require.Contains(t, n.IndexCond, "$1", "the gate's probe is planned per call\n%s", p.String())
			}
		})
	}
	return probes
}

func TestPlans_HotStatementsKeepTheirPlans(t *testing.T) {
	t.Parallel()
	for _, stats := range []string{"analyzed", "1M", "bulk", "emptied", "emptied fleet"} {
		t.Run(stats, func(t *testing.T) {
			t.Parallel()
			f, rec, st := planFx(t, stats)
			ctx := f.ctx
			// a seq scan of a relation of a few pages is the cheap plan (the
			// outbox partition, the edges of a 10k fleet); the planner reads
			// the size from the relation, so it cannot outlive its growth
			small := plantest.SmallRelations(t, f.pool, 64, planHot...)
			var allow []plantest.Allow
			if stats == "bulk" {
				// Without statistics the planner sizes resources from its
				// pages alone, and at 10k rows (300 pages) hashing a Seq Scan
				// is the cheaper way to update 99 children; with statistics,
				// and at 1M rows, it probes the primary key.
				allow = append(allow, plantest.Allow{Match: "ON CONFLICT (kind, name) DO NOTHING", Relation: "resources"})
			}
			spec := func(rules []plantest.Rule) plantest.Spec {
				return plantest.Spec{Hot: planHot, Parts: planParts, Small: small, Rules: rules, Allow: allow}
			}

			t.Run("claim", func(t *testing.T) {
				ts, err := st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, Batch{Kind: "leaf", Version: "v1", TaskType: TaskReconcile, Max: 50})
				require.NoError(t, err)
				require.NotEmpty(t, ts)
				plans := rec.Take(t)
				// The partitions' copies of idx_work_queue_pending and of
				// idx_work_queue_settled (the rollups, taken first) are
				// named …_idx and …_idx1.
				plantest.Check(t, plans, spec([]plantest.Rule{
					{Match: "WITH settled AS", Uses: []string{"work_queue_kind_version_task_type_not_before_idx",
						"work_queue_kind_version_task_type_not_before_idx1"}},
					{Match: "WITH upd AS", Uses: []string{"resources_pkey"}},
				}))
				updatesByTID(t, plans, "WITH upd AS", "work_queue")
				t.Log("\n" + plantest.Summary(plans))

				var results []Result
				for _, task := range ts {
					results = append(results, task.Result(json.RawMessage(`{"net_id":"n3"}`)))
				}
				require.NoError(t, st.AppendOutbox(ctx, results...))
				rec.Take(t)
			})

			t.Run("leases", func(t *testing.T) {
				// A broker heartbeats the leases it holds, adopts the ones a
				// reconnecting worker reports, and releases what it will not
				// run: each locks the rows by key (a primary-key probe a
				// key) and stamps the locked rows by TID.
				ts, err := st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, Batch{Kind: "leaf", Version: "v1", TaskType: TaskReconcile, Max: 20})
				require.NoError(t, err)
				require.Len(t, ts, 20)
				rec.Take(t)
				keys, held := leaseKeys(ts)
				n, err := st.Heartbeat(ctx, "w", 0, 15, keys)
				require.NoError(t, err)
				require.Equal(t, len(keys), n)
				adopted, err := st.Adopt(ctx, "w2", held)
				require.NoError(t, err)
				require.Len(t, adopted, len(keys))
				n, err = st.Release(ctx, Lease{WorkerID: "w2", Lo: 0, Hi: 15}, keys)
				require.NoError(t, err)
				require.Equal(t, len(keys), n)
				plans := rec.Take(t)
				pkey := []string{"work_queue_pkey"}
				plantest.Check(t, plans, spec([]plantest.Rule{
					{Match: "w.worker_id = p_worker", Uses: pkey},  // heartbeat's and release's lock
					{Match: "w.claim_epoch = k.epoch", Uses: pkey}, // adopt's
				}))
				for _, stamp := range []string{"SET heartbeat_at = $1 WHERE", "WITH a AS", "WITH rel AS"} {
					updatesByTID(t, plans, stamp, "work_queue")
				}
				t.Log("\n" + plantest.Summary(plans))
			})

			t.Run("claimable probes", func(t *testing.T) {
				// Both probes walk idx_work_queue_pending in its own order. The
				// spans probe was planned as a bitmap over the primary key's
				// shard range (every row of the partition, leased or not), and
				// the idle probe as a hash semi-join over a Seq Scan of every
				// partition.
				_, err := st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 31}, Batch{Kind: "leaf", Version: "v1", TaskType: TaskReconcile, Max: 1})
				require.NoError(t, err)
				has, err := st.Claimable(ctx, 0, 15, []Batch{{Kind: "leaf", Version: "v1", TaskType: TaskReconcile}, {Kind: "comp", Version: "v1", TaskType: TaskDelete}})
				require.NoError(t, err)
				require.Equal(t, []bool{true, false}, has)
				plans := rec.Take(t)
				pending := []string{"work_queue_kind_version_task_type_not_before_idx"}
				plantest.Check(t, plans, spec([]plantest.Rule{
					{Match: "unnest(p_los, p_his)", Uses: pending},
					{Match: "unnest(p_kinds, p_versions, p_task_types)", Uses: pending},
					{Match: "WITH settled AS", Uses: pending},
				}))
				t.Log("\n" + plantest.Summary(plans))
			})

			t.Run("rollup probe", func(t *testing.T) {
				// A claim of rollups only probes their partial index, never
				// the pending one's composes.
				_, err := st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 31},
					Batch{Kind: "comp", Version: "v1", TaskType: TaskReconcile, Max: 10, OnlyRollups: true})
				require.NoError(t, err)
				plans := rec.Take(t)
				plantest.Check(t, plans, spec([]plantest.Rule{
					{Match: "w.worker_id IS NULL AND w.trigger = 'childrenSettled'",
						Uses: []string{"work_queue_kind_version_task_type_not_before_idx1"}},
				}))
				t.Log("\n" + plantest.Summary(plans))
			})

			t.Run("claim in a generic-plan session", func(t *testing.T) {
				// The claim's statements are planned for each call with
				// their arguments whatever the session's setting: a generic
				// plan of the lock costs all 16 partitions and prunes them
				// only when it starts (the stamp, run by EXECUTE, is planned
				// for its arguments in any case).
				cfg := f.pool.Config()
				cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
				generic := New(plantest.Pool(t, cfg, rec))
				for range plantest.KeptPlanCalls {
					ts, err := generic.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, Batch{Kind: "leaf", Version: "v1", TaskType: TaskReconcile, Max: 1})
					require.NoError(t, err)
					require.Len(t, ts, 1)
				}
				plans := rec.Take(t)
				plantest.Check(t, plans, spec(nil))
				updatesByTID(t, plans, "WITH upd AS", "work_queue")
				locks := 0
				for _, p := range plans {
					if !strings.Contains(p.Query, "WITH settled AS") {
						continue
					}
					locks++
					p.Plan.Walk(func(n plantest.Node) {
						require.Zero(t, n.RemovedSubs, "the lock's plan was made without its arguments (pruned at startup)\n%s", p)
					})
				}
				require.Equal(t, plantest.KeptPlanCalls, locks)
				t.Log("\n" + plantest.Summary(plans))
			})

			t.Run("outbox lag", func(t *testing.T) {
				// the head of each partition's idx_work_outbox_fifo, merged
				// in id order: never a sort of the backlog
				lag, err := st.OutboxLag(ctx, 0, 15)
				require.NoError(t, err)
				require.Positive(t, lag, "results wait in the outbox")
				plans := rec.Take(t)
				plantest.Check(t, plans, spec([]plantest.Rule{
					{Match: "FROM work_outbox o\n", Uses: []string{"work_outbox_p0_id_idx"}},
				}))
				for _, p := range plans {
					p.Plan.Walk(func(n plantest.Node) { require.NotEqual(t, "Sort", n.Type, "the backlog sorted\n%s", p.String()) })
				}
				t.Log("\n" + plantest.Summary(plans))
			})

			t.Run("drain", func(t *testing.T) {
				// below the backlog (the claim added 50 to ~400): with a limit past
				// every row of the partition, reading it whole and sorting is
				// the cheaper plan, and it is bounded by the partition's size
				n, err := st.DrainOutboxBatch(ctx, 100, 0, 15)
				require.NoError(t, err)
				require.NotZero(t, n)
				plans := rec.Take(t)
				plantest.Check(t, plans, spec([]plantest.Rule{
					{Match: "WITH popped AS"}, // idx_work_outbox_fifo or the primary key, never a scan past the small
					{Match: "WITH oc AS", Uses: []string{"work_queue_pkey"}},
					// schedule_candidates: the candidates by primary key, the
					// upstream gate through the edges' primary key
					{Match: "WITH cand AS MATERIALIZED", Uses: []string{"resources_pkey", "resource_deps_pkey"}},
				}))
				// the status update (drain_apply) and the value flows'
				// spec update (drain_value_flows) write the rows they read
				updatesByTID(t, plans, "WITH per AS", "resources")
				updatesByTID(t, plans, "WITH srcs AS", "resources")
				t.Log("\n" + plantest.Summary(plans))
			})

			t.Run("rollup gate", func(t *testing.T) {
				// a top root's probe reads the unsettled partial index; a
				// nested composite's walk probes the phase index by owner at
				// every step (as a join, the step was a hash join over a Seq
				// Scan of resource_phases at 1M-row statistics)
				rows, err := f.pool.Query(ctx, `SELECT id::text FROM resources WHERE kind = 'comp' ORDER BY name LIMIT 3`)
				require.NoError(t, err)
				roots, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				require.Len(t, roots, 3)
				for _, root := range roots {
					for _, top := range []bool{true, false} {
						require.Equal(t, 1, gateAsDrain(t, st.pool, root, top), "40% of the root's leaves reconcile and none is in flight")
					}
				}
				plans := rec.Take(t)
				plantest.Check(t, plans, spec([]plantest.Rule{
					{Match: "FROM resource_phases d", Uses: []string{"idx_resource_phases_unsettled"}},
					{Match: "WITH RECURSIVE sub", Uses: []string{"idx_resource_phases_owner_page"}},
				}))
				require.Positive(t, genericGateProbes(t, plans), "no probe of the unsettled index recorded")
				t.Log("\n" + plantest.Summary(plans))

				// the other owner-subtree walks take the same per-step probe:
				// the rollup rechecks' and the live subtree's descendant_ids,
				// explain's unsettled list
				for _, root := range roots {
					var n, unsettled int
					require.NoError(t, st.pool.QueryRow(ctx, `SELECT count(*) FROM descendant_ids($1::uuid)`, root).Scan(&n))
					require.Equal(t, 99, n)
					require.NoError(t, st.pool.QueryRow(ctx, `SELECT count(*) FROM explain_unsettled($1::uuid, false)`, root).Scan(&unsettled))
					require.Positive(t, unsettled)
					require.Less(t, unsettled, n)
				}
				plans = rec.Take(t)
				plantest.Check(t, plans, spec([]plantest.Rule{
					{Match: "SELECT c.id FROM resources c WHERE c.owner_id = p_root", Uses: []string{"idx_resources_owner"}},
					{Match: "explain_unsettled(", Uses: []string{"idx_resource_phases_owner_page"}},
				}))
				t.Log("\n" + plantest.Summary(plans))
			})

			t.Run("rollup rechecks", func(t *testing.T) {
				// The straddle close-out: armed roots' unsettled descendants
				// read from the unsettled index (40% of each root's leaves
				// reconcile) and their rows probed by key, never the phase
				// rows or resources walked whole; then the gate in re-pend
				// mode and the disarm.
				f.exec(`INSERT INTO rollup_recheck (root_id, shard_id)
SELECT id, shard_id FROM resources WHERE kind = 'comp' ORDER BY name LIMIT 3 ON CONFLICT DO NOTHING`)
				_, err := st.DrainRollupRechecks(ctx, 10, 0, 15)
				require.NoError(t, err)
				require.Zero(t, scalar[int](f, `SELECT count(*) FROM rollup_recheck`), "every armed root is pended or disarmed")
				plans := rec.Take(t)
				plantest.Check(t, plans, spec([]plantest.Rule{
					{Match: "CROSS JOIN LATERAL (SELECT 1 FROM resources d", Uses: []string{"idx_resource_phases_unsettled", "resources_pkey"}},
				}))
				t.Log("\n" + plantest.Summary(plans))
			})

			t.Run("compose", func(t *testing.T) {
				f.exec(`INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation)
SELECT id, 'reconcile', shard_id, kind, version, generation FROM resources WHERE kind = 'comp'
ON CONFLICT DO NOTHING`)
				ts, err := st.Claim(ctx, Lease{WorkerID: "w", Lo: 0, Hi: 15}, Batch{Kind: "comp", Version: "v1", TaskType: TaskReconcile, Max: 1})
				require.NoError(t, err)
				require.Len(t, ts, 1)
				rec.Take(t)
				name := ts[0].Resource.Name
				c := Composition{}
				for i := 1; i <= 120; i++ { // 99 owned, 21 new
					c.Children = append(c.Children, Child{Kind: "leaf", Name: fmt.Sprintf("%s-leaf-%d", name, i)})
				}
				c.Edges = []Edge{{Dependent: name + "-leaf-110", Dependency: Ref{Kind: "leaf", Name: "root-9-leaf-3"}}}
				_, err = st.ApplyCompose(ctx, ts[0], c)
				require.NoError(t, err)
				plans := rec.Take(t)
				plantest.Check(t, plans, spec([]plantest.Rule{
					{Match: "SELECT c.id FROM resources c WHERE c.owner_id = $1", Uses: []string{"resources_pkey", "idx_resources_owner"}},
					{Match: "SELECT r.kind, r.name, r.id", Uses: []string{"resources_kind_name_key"}},
					{Match: "ON CONFLICT (kind, name) DO NOTHING"},
					{Match: "DELETE FROM resource_deps d", Uses: []string{"resource_deps_pkey"}},
				}))
				t.Log("\n" + plantest.Summary(plans))
			})

			t.Run("dead member's leases", func(t *testing.T) {
				// For a minute after a member's crash, every member's
				// dead-member probe frees the leases its id still holds,
				// twice a second: through the leased rows' own index, never
				// a scan of every queued row (a 1M fleet queues hundreds of
				// thousands). Last: it frees the fixture's leases.
				f.exec(`INSERT INTO cluster_member_tombstones (member_id) VALUES ('w-old')`)
				reaped, err := membership.New(plantest.Pool(t, f.pool.Config(), rec)).ReapUnlocked(ctx, 0)
				require.NoError(t, err)
				require.Empty(t, reaped)
				var held int
				require.NoError(t, f.pool.QueryRow(ctx, `SELECT count(*) FROM work_queue WHERE worker_id = 'w-old'`).Scan(&held))
				require.Zero(t, held, "the tombstoned id's leases are freed")
				plans := rec.Take(t)
				// Every partition's leased-row index (a dead broker's range is
				// not known here; an empty partition's index is one page),
				// never a scan; the update probes the held rows' keys.
				plantest.Check(t, plans, plantest.Spec{Hot: planHot, Small: small, Allow: allow,
					Bounded: []string{"work_queue_kind_version_heartbeat_at_idx", "lifecycle_outbox_heartbeat_at_idx"},
					Rules: []plantest.Rule{
						{Match: "WITH held AS", Uses: []string{"work_queue_p0_kind_version_heartbeat_at_idx", "work_queue_p0_pkey"}},
						{Match: "UPDATE lifecycle_outbox l", Uses: []string{"lifecycle_outbox_p0_heartbeat_at_idx"}},
					}})
				// The held rows all live in partition 0, so the update's
				// probes by key reach its primary key alone: reaching every
				// partition's is the loop the other way round, each
				// partition's key read whole.
				for _, p := range plans {
					if !strings.Contains(p.Query, "WITH held AS") {
						continue
					}
					for _, sc := range p.Scans() {
						if strings.HasSuffix(sc.Index, "_pkey") {
							require.Equal(t, "work_queue_p0_pkey", sc.Index, "the update reads another partition's key\n%s", p)
						}
					}
				}
				t.Log("\n" + plantest.Summary(plans))
			})
		})
	}
}
