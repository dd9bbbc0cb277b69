package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/internal/plantest"
	"github.com/converge-run/converge/core/store/maintenance"
)

// The reaper's walks keep their plans at 10k rows, at 1M-row statistics and
// after a bulk load the statistics have not seen: they read the partial
// indexes of the rows they act on (lagging, failed, frozen, deleting), never
// the table, and each queue statement prunes to the range's partition.
func TestPlans_ReaperWalksKeepTheirPlans(t *testing.T) {
	t.Parallel()
	for _, stats := range []string{"analyzed", "1M", "bulk"} {
		t.Run(stats, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			f.kind(kind{name: "leaf", orphanGraceS: 60})
			if stats == "bulk" {
				f.exec(`ANALYZE`)
			}
			// 10k rows in shards 0-15: 2% lagging without a task (the
			// requeue's work), 1% failed, 1% expired orphans, 1% deleting;
			// the rest settled, a tenth of them queued and leased.
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
			switch stats {
			case "analyzed":
				f.exec(`ANALYZE`)
			case "1M":
				f.exec(`ANALYZE`)
				plantest.Inflate(t, f.db, 100, "resources", "work_queue")
			}
			rec := &plantest.Recorder{}
			st := maintenance.New(plantest.Pool(t, f.db.Config(), rec)).WithClock(func() time.Time { return t0 })
			r := shard.Between(0, 15)
			spec := plantest.Spec{
				Hot:   []string{"resources", "work_queue"},
				Parts: []string{"work_queue"},
				Small: plantest.SmallRelations(t, f.db, 64, "work_queue"),
			}

			for _, step := range []struct {
				name string
				run  func() (int, error)
				uses []plantest.Rule
			}{
				{"requeue", func() (int, error) { return st.RequeueFailedAndPending(ctx, r, 100, time.Minute) }, nil},
				{"reap", func() (int, error) { return st.ReapStaleWork(ctx, r, time.Minute) }, nil},
				{"orphans", func() (int, error) { return st.SweepExpiredOrphans(ctx, r, 100) }, nil},
				{"deletable", func() (int, error) { return st.SweepDeletable(ctx, r, 100) }, nil},
			} {
				_, err := step.run()
				require.NoError(t, err, step.name)
				plans := rec.Take(t)
				require.NotEmpty(t, plans, step.name)
				spec.Rules = step.uses
				plantest.Check(t, plans, spec)
				t.Logf("%s:\n%s", step.name, plantest.Summary(plans))
			}
		})
	}
}
