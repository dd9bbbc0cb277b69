package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/core/store/pipeline"
)

func TestQuarantineResource_DropsPendingReconcileButNeverADelete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	pending := f.res(res{kind: "net", gen: 2, lagging: true})
	f.task(pending, "reconcile", "", t0, t0)
	tearing := f.res(res{kind: "net", deleting: true, finalizers: []string{"net.example/teardown"}})
	f.task(tearing, "delete", "", t0, t0)

	require.True(t, f.bool(`SELECT quarantine_resource($1)`, pending))
	require.True(t, f.bool(`SELECT quarantine_resource($1)`, tearing))
	require.Equal(t, "Quarantined", f.phase(pending))
	require.Empty(t, f.tasks(pending), "a quarantined row stops retrying")
	require.Equal(t, []task{{taskType: "delete", trigger: "specChange", gen: 1}}, f.tasks(tearing),
		"quarantine must not interfere with teardown")
	require.Equal(t, "Deleting", f.phase(tearing), "Deleting outranks Quarantined")
	require.False(t, f.bool(`SELECT quarantine_resource(gen_random_uuid())`), "missing row")
}

// Every scheduler path skips a quarantined row; unquarantine re-arms it.
func TestQuarantineResource_FreezesEverySchedulerPath(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf", resyncSecs: 60})
	old := t0.Add(-time.Hour)
	one := func(s int) shard.Range { return shard.Between(s, s) }

	cases := map[string]struct {
		reason      string
		row         res
		run         func(id string, shard int) int
		wantRelease bool // unquarantine enqueues a reconcile
	}{
		"ScheduleEligible": {
			reason:      "the gate itself skips frozen rows",
			row:         res{gen: 2, lagging: true, updatedAt: old},
			run:         func(id string, _ int) int { return f.int(`SELECT schedule_eligible(ARRAY[$1::uuid])`, id) },
			wantRelease: true,
		},
		"RequeueFailedAndPending": {
			reason: "the crash catch-up skips frozen rows",
			row:    res{gen: 2, failed: true, updatedAt: old},
			run: func(_ string, s int) int {
				n, err := f.at(t0).RequeueFailedAndPending(ctx, one(s), 100, time.Minute)
				require.NoError(t, err)
				return n
			},
			wantRelease: true,
		},
		"RequeueForResync": {
			reason: "the drift engine skips frozen rows",
			row:    res{updatedAt: old},
			run: func(_ string, s int) int {
				n, err := f.at(t0).RequeueForResync(ctx,
					maintenance.Resync{Kind: "leaf", Version: "v1", Interval: time.Minute}, one(s), 100)
				require.NoError(t, err)
				return n
			},
		},
		"ResyncResource": {
			reason: "an operator resync is a no-op while quarantined",
			row:    res{updatedAt: old},
			run: func(id string, _ int) int {
				if f.bool(`SELECT resync_resource($1)`, id) {
					return 1
				}
				return 0
			},
		},
		"SpecEdit": {
			reason: "a spec edit while quarantined bumps generation but schedules nothing",
			row:    res{updatedAt: old},
			run: func(id string, _ int) int {
				f.exec(`UPDATE resources SET spec = '{"cidr": "10.1.0.0/16"}' WHERE id = $1`, id)
				require.Equal(t, 2, f.int(`SELECT generation FROM resources WHERE id = $1`, id))
				return f.int(`SELECT schedule_eligible(ARRAY[$1::uuid])`, id)
			},
			wantRelease: true, // released, it reconciles to its latest spec
		},
	}
	shard := 0
	for name, tc := range cases {
		shard++
		tc.row.shard = shard
		id := f.res(tc.row)
		require.True(t, f.bool(`SELECT quarantine_resource($1)`, id))
		require.Zero(t, tc.run(id, shard), "%s: %s", name, tc.reason)
		require.Empty(t, f.tasks(id), "%s: %s", name, tc.reason)

		require.True(t, f.bool(`SELECT unquarantine_resource($1)`, id))
		require.NotEqual(t, "Quarantined", f.phase(id), name)
		require.Equal(t, tc.wantRelease, len(f.tasks(id)) == 1,
			"%s: unquarantine re-arms a lagging row through schedule_eligible", name)
	}
}

func TestQuarantineResource_UnblocksItsRootsRollup(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "bom", hasComposer: true, hasRollup: true})
	f.kind(kind{name: "leaf"})
	root := f.res(res{kind: "bom", gen: 2, composedGen: 2, lagging: true}) // composed, awaiting its rollup
	stuck := f.res(res{gen: 1, lagging: true, owner: root, root: root})
	require.Zero(t, f.int(`SELECT schedule_eligible(ARRAY[$1::uuid])`, root), "a progressing child holds the root back")

	require.True(t, f.bool(`SELECT quarantine_resource($1)`, stuck))
	require.Len(t, f.tasks(root), 1, "the set-aside child no longer blocks the rollup: the root runs now")
}

func TestUnquarantineResource_LiftsOnlyAQuarantine(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	orphan := f.res(res{gen: 2, lagging: true, frozen: ptr(t0.Add(time.Hour))})
	require.True(t, f.bool(`SELECT unquarantine_resource($1)`, orphan), "the row exists")
	require.Equal(t, "Orphaned", f.phase(orphan), "an orphan's grace deadline is not an operator's quarantine")
	require.Empty(t, f.tasks(orphan))
	require.False(t, f.bool(`SELECT unquarantine_resource(gen_random_uuid())`), "missing row")
}

// The drain's two paths into a dependent — the cascade that schedules it when
// its upstream syncs, and the value-flow substitution into its spec — both
// skip a quarantined dependent; its unfrozen twin gets both.
func TestQuarantineResource_FreezesTheCascadeAndSubstitution(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.needs("drain_outbox_batch", "claim_budget")
	f.kind(kind{name: "leaf"})
	up := f.res(res{name: "vpc", gen: 2, lagging: true})
	frozen := f.res(res{name: "frozen-route"})
	live := f.res(res{name: "live-route"})
	for _, dep := range []string{frozen, live} {
		f.exec(`INSERT INTO resource_deps (dependent_id, dependency_id, value_flows)
		        VALUES ($1, $2, '[{"src_field": "/vpc_id", "dep_field": "/vpc_id"}]')`, dep, up)
	}
	require.True(t, f.bool(`SELECT quarantine_resource($1)`, frozen))
	require.Equal(t, 1, f.int(`SELECT schedule_eligible(ARRAY[$1::uuid], $2)`, up, t0))

	worked := f.work(t0, pipeline.TaskReconcile, `{"vpc_id": "vpc-123"}`, "leaf")
	require.Equal(t, []string{up}, worked)
	require.Equal(t, "Ready", f.phase(up))

	var frozenSpec, liveSpec string
	require.NoError(t, f.db.QueryRow(ctx, `SELECT spec::text FROM resources WHERE id = $1`, frozen).Scan(&frozenSpec))
	require.NoError(t, f.db.QueryRow(ctx, `SELECT spec::text FROM resources WHERE id = $1`, live).Scan(&liveSpec))
	require.JSONEq(t, `{}`, frozenSpec, "no substitution into a quarantined dependent")
	require.JSONEq(t, `{"vpc_id": "vpc-123"}`, liveSpec, "the live twin receives the value flow")
	require.Empty(t, f.tasks(frozen), "the cascade schedules nothing for a quarantined dependent")
	require.Len(t, f.tasks(live), 1, "the live twin is re-pended by the cascade")
	require.Equal(t, "Quarantined", f.phase(frozen))
}
