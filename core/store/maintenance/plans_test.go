package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/internal/plantest"
	"github.com/converge-run/converge/core/store/maintenance"
)

// The reaper's walks keep their plans at 10k rows, at 1M-row statistics,
// after a bulk load the statistics have not seen and with the queue
// analyzed while it was drained (it looks empty): they read the partial
// indexes of the rows they act on (lagging, failed, frozen, deleting), never
// the table, and each queue statement prunes to the range's partition; and
// with every fleet table analyzed while empty (a fleet torn down, another
// applied).
func TestPlans_ReaperWalksKeepTheirPlans(t *testing.T) {
	t.Parallel()
	for _, stats := range []string{"analyzed", "1M", "bulk", "emptied", "emptied fleet"} {
		t.Run(stats, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.kind(kind{name: "leaf", orphanGraceS: 60, resyncSecs: 3600})
			if stats == "bulk" {
				f.exec(`ANALYZE`)
			}
			loadReaperRows(f)
			switch stats {
			case "analyzed":
				f.exec(`ANALYZE`)
			case "1M":
				f.exec(`ANALYZE`)
				plantest.Inflate(t, f.db, 100, "resources", "work_queue")
			case "emptied":
				f.exec(`ANALYZE`)
				plantest.AnalyzeEmptied(t, f.db, "work_queue")
			case "emptied fleet":
				// a fleet torn down, analyzed, and another applied
				f.exec(`ANALYZE`)
				plantest.AnalyzeEmptied(t, f.db, "resources", "resource_phases", "resource_labels", "resource_deps", "resource_events", "work_queue")
			}
			rec := &plantest.Recorder{}
			st := maintenance.New(plantest.Pool(t, f.db.Config(), rec)).WithClock(func() time.Time { return t0 })
			r := shard.Between(0, 15)
			spec := plantest.Spec{
				Hot:   []string{"resources", "work_queue", "resource_events"},
				Parts: []string{"work_queue"},
				Small: plantest.SmallRelations(t, f.db, 64, "work_queue"),
			}

			checkWalks(t, reaperWalks(st, r), rec, spec)
		})
	}
}

// TestPlans_ReaperSessionPlannedOnEmptyTables: the reaper's session starts
// on a fresh install's empty tables and keeps the generic plans it made
// there until an ANALYZE replaces them, a minute or more into a bulk apply.
// One session walks six times on empty, analyzed tables; after the 10k rows
// are loaded (no ANALYZE), its next walks still read no table that grows
// with the fleet by Seq Scan, whatever its size (no small-table allowance:
// a kept plan does not follow the table's growth).
func TestPlans_ReaperSessionPlannedOnEmptyTables(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf", orphanGraceS: 60, resyncSecs: 3600})
	f.exec(`ANALYZE`)
	rec := &plantest.Recorder{}
	st := maintenance.New(plantest.Session(t, f.db.Config(), rec)).WithClock(func() time.Time { return t0 })
	r := shard.Between(0, 15)
	walks := reaperWalks(st, r)
	for range plantest.KeptPlanCalls {
		for _, step := range walks {
			_, err := step.run()
			require.NoError(t, err, step.name)
		}
	}
	rec.Take(t)

	loadReaperRows(f)
	checkWalks(t, walks, rec, plantest.Spec{Hot: []string{"resources", "resource_phases", "work_queue", "resource_events"}, Parts: []string{"work_queue"}})
}

// checkWalks runs each walk once and checks the plans rec recorded for it.
func checkWalks(t *testing.T, walks []reaperWalk, rec *plantest.Recorder, spec plantest.Spec) {
	t.Helper()
	for _, step := range walks {
		_, err := step.run()
		require.NoError(t, err, step.name)
		plans := rec.Take(t)
		require.NotEmpty(t, plans, step.name)
		plantest.Check(t, plans, spec)
		t.Logf("%s:\n%s", step.name, plantest.Summary(plans))
	}
}

// loadReaperRows writes 10k rows in shards 0-15: 2% lagging without a task
// (the requeue's work), 1% failed, 1% expired orphans, 1% deleting; the
// rest settled, a tenth of them queued and leased.
func loadReaperRows(f *fixture) {
	f.exec(`
INSERT INTO resources (id, kind, version, name, shard_id, synced_gen, failure_gen, frozen_until, deletion_requested_at, updated_at)
SELECT id, 'leaf', 'v1', 'r-' || g, shard_of(id) & 15,
       CASE WHEN g % 100 < 2 THEN 0 ELSE 1 END,
       CASE WHEN g % 100 = 2 THEN 1 ELSE 0 END,
       CASE WHEN g % 100 = 3 THEN $1::timestamptz - interval '1 hour' END,
       CASE WHEN g % 100 = 4 THEN $1::timestamptz - interval '1 hour' END,
       $1::timestamptz - interval '1 day'
  FROM (SELECT gen_random_uuid() AS id, g FROM generate_series(1, 10000) g) x`, t0)
	f.exec(`
INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, worker_id, claim_epoch, leased_at, heartbeat_at)
SELECT id, 'reconcile', shard_id, kind, version, generation, 'w', 1, $1::timestamptz - interval '1 hour', $1::timestamptz - interval '1 hour'
  FROM resources WHERE name ~ '0$' AND synced_gen >= generation AND failure_gen <> generation`, t0)
	// Two events a resource, the oldest 1% past a week's retention.
	f.exec(`
INSERT INTO resource_events (resource_id, type, reason, created_at)
SELECT id, 'Normal', 'Loaded', $1::timestamptz - CASE WHEN n <= 200 THEN interval '8 days' ELSE interval '1 hour' END
  FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM resources, generate_series(1, 2)) x ORDER BY n`, t0)
}

// reaperWalk is one of the reaper's walks, by name.
type reaperWalk struct {
	name string
	run  func() (int, error)
}

// reaperWalks are the reaper's walks over r, as its ticks run them.
func reaperWalks(st *maintenance.Store, r shard.Range) []reaperWalk {
	return []reaperWalk{
		{"requeue", func() (int, error) { return st.RequeueFailedAndPending(ctx, r, 100, time.Minute) }},
		{"reap", func() (int, error) { return st.ReapStaleWork(ctx, r, time.Minute) }},
		{"orphans", func() (int, error) { return st.SweepExpiredOrphans(ctx, r, 100) }},
		{"deletable", func() (int, error) { return st.SweepDeletable(ctx, r, 100) }},
		{"resync", func() (int, error) {
			return st.RequeueForResync(ctx, maintenance.Resync{Kind: "leaf", Version: "v1", Interval: time.Hour}, r, 100)
		}},
		{"unclaimed", func() (int, error) { return st.DeleteUnclaimedWork(ctx, r, time.Hour) }},
		{"lifecycle", func() (int, error) { return st.ReapStaleLifecycle(ctx, r, time.Minute) }},
		{"inflight", func() (int, error) { return st.RecountInflight(ctx, r) }},
		{"events", func() (int, error) { return st.PruneEvents(ctx, t0.Add(-7*24*time.Hour), 1000) }},
	}
}

// With nothing expired, an event prune is one probe of the primary key,
// however long the log: 20,000 events inside the retention, and the pass
// reads a handful of buffers and deletes nothing.
func TestPlans_EventPruneIdleIsOneProbe(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.res(res{})
	f.exec(`INSERT INTO resource_events (resource_id, type, reason, created_at)
SELECT $1, 'Normal', 'Test', $2::timestamptz - interval '1 hour' FROM generate_series(1, 20000)`, r, t0)
	f.exec(`ANALYZE`)
	rec := &plantest.Recorder{}
	st := maintenance.New(plantest.Session(t, f.db.Config(), rec))
	n, err := st.PruneEvents(ctx, t0.Add(-7*24*time.Hour), 10000)
	require.NoError(t, err)
	require.Zero(t, n)
	plans := rec.Take(t)
	require.Len(t, plans, 1)
	require.Less(t, plans[0].Buffers(), int64(10), plantest.Summary(plans))
	require.Equal(t, 20000, f.int(`SELECT count(*)::int FROM resource_events`))
}
