package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
)

func TestRequeueForResync_RePendsSettledRowsOfAnOptedInKind(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "probe", resyncSecs: 60})
	f.kind(kind{name: "leaf"})
	const interval = time.Minute
	old := t0.Add(-2 * interval)
	policy := maintenance.Resync{Kind: "probe", Version: "v1", Interval: interval}

	cases := map[string]struct {
		reason string
		row    res
		queued bool // pre-existing reconcile task
		want   bool
	}{
		"ReadyPastInterval":    {reason: "a settled row due for a re-observe", row: res{updatedAt: old}, want: true},
		"DegradedPastInterval": {reason: "a degraded row is re-observed too: that is how it recovers", row: res{healthBad: true, updatedAt: old}, want: true},
		"ReadyInsideInterval":  {reason: "reconciled within the interval", row: res{updatedAt: t0.Add(-interval / 2)}},
		"Lagging":              {reason: "a lagging row belongs to the scheduler, not the drift engine", row: res{gen: 2, lagging: true, updatedAt: old}},
		"Failed":               {reason: "a failed row is not settled", row: res{gen: 2, failed: true, updatedAt: old}},
		"Quarantined":          {reason: "frozen from every scheduler", row: res{quarantined: true, updatedAt: old}},
		"Orphaned":             {reason: "frozen in its grace window", row: res{frozen: ptr(t0.Add(time.Hour)), updatedAt: old}},
		"Deleting":             {reason: "being torn down", row: res{deleting: true, updatedAt: old}},
		"AlreadyQueued":        {reason: "a queued reconcile observes it anyway", row: res{updatedAt: old}, queued: true},
		"OtherKind":            {reason: "only the named kind", row: res{kind: "leaf", updatedAt: old}},
	}
	sh := 0
	for name, tc := range cases {
		sh++
		tc.row.shard = sh
		if tc.row.kind == "" {
			tc.row.kind = "probe"
		}
		id := f.res(tc.row)
		if tc.queued {
			f.task(id, "reconcile", "", time.Time{}, old)
		}
		n, err := f.at(t0).RequeueForResync(ctx, policy, shard.Between(sh, sh), 100)
		require.NoError(t, err, name)
		got := f.tasks(id)
		if tc.want {
			require.Equal(t, 1, n, "%s: %s", name, tc.reason)
			require.Equal(t, []task{{taskType: "reconcile", trigger: "resync", gen: 1}}, got, "%s: %s", name, tc.reason)
		} else {
			require.Zero(t, n, "%s: %s", name, tc.reason)
			require.Len(t, got, map[bool]int{true: 1, false: 0}[tc.queued], "%s: %s", name, tc.reason)
		}
	}
	require.Zero(t, f.int(`SELECT count(*) FROM resources WHERE kind = 'probe' AND synced_gen >= generation AND generation <> 1`),
		"resync never bumps generation")
}

func TestRequeueForResync_IsFreeForKindsThatDoNotOptIn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	f.res(res{updatedAt: t0.Add(-time.Hour)})
	for _, p := range []maintenance.Resync{
		{Kind: "leaf", Version: "v1", Interval: time.Second},
		{Kind: "unknown", Version: "v1", Interval: time.Second},
	} {
		n, err := f.at(t0).RequeueForResync(ctx, p, shard.All, 100)
		require.NoError(t, err)
		require.Zero(t, n, "kind %s has resync_interval_secs = 0 or no kind_config row", p.Kind)
	}
	require.Zero(t, f.int(`SELECT count(*) FROM work_queue`))
}

func TestRequeueForResync_RePendsOncePerInterval(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "probe", resyncSecs: 60})
	id := f.res(res{kind: "probe", updatedAt: t0.Add(-time.Hour)})
	policy := maintenance.Resync{Kind: "probe", Version: "v1", Interval: time.Minute}
	complete := func() { f.exec(`DELETE FROM work_queue WHERE resource_id = $1`, id) }

	steps := []struct {
		reason string
		at     time.Time
		want   int
	}{
		{reason: "due: last touched an hour ago", at: t0, want: 1},
		{reason: "stamped last_resync_at at t0: not due again inside the interval", at: t0.Add(59 * time.Second), want: 0},
		{reason: "due again one interval after the last resync", at: t0.Add(61 * time.Second), want: 1},
	}
	for _, s := range steps {
		n, err := f.at(s.at).RequeueForResync(ctx, policy, shard.All, 100)
		require.NoError(t, err)
		require.Equal(t, s.want, n, s.reason)
		complete()
	}
}

func TestRequeueForResync_RecomposeLowersComposedGen(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "bom", resyncSecs: 60, hasComposer: true, hasRollup: true})
	old := t0.Add(-time.Hour)
	plain := f.res(res{kind: "bom", shard: 1, gen: 3, composedGen: 3, updatedAt: old})
	recompose := f.res(res{kind: "bom", shard: 2, gen: 3, composedGen: 3, updatedAt: old})

	for _, c := range []struct {
		shard     int
		recompose bool
	}{{1, false}, {2, true}} {
		n, err := f.at(t0).RequeueForResync(ctx, maintenance.Resync{Kind: "bom", Version: "v1", Interval: time.Minute,
			Recompose: c.recompose}, shard.Between(c.shard, c.shard), 10)
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	require.Equal(t, 3, f.int(`SELECT composed_gen FROM resources WHERE id = $1`, plain),
		"a plain resync re-observes without recomposing")
	require.Equal(t, 2, f.int(`SELECT composed_gen FROM resources WHERE id = $1`, recompose),
		"composed_gen < generation is what makes the pipeline run the composer")
	require.Equal(t, 3, f.int(`SELECT generation FROM resources WHERE id = $1`, recompose), "no generation bump")
	require.Equal(t, "Ready", f.phase(recompose), "the row stays settled while it re-observes")
}

func TestResyncResource_RePendsUnlessFrozenOrDeleting(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	f.kind(kind{name: "bom", hasComposer: true, recomposes: true})

	cases := map[string]struct {
		reason      string
		row         res
		want        bool
		wantTrigger string
	}{
		"Settled":     {reason: "a settled row re-observes with trigger resync", row: res{}, want: true, wantTrigger: "resync"},
		"Lagging":     {reason: "a lagging row goes through schedule_eligible", row: res{gen: 2, lagging: true}, want: true, wantTrigger: "specChange"},
		"Quarantined": {reason: "a no-op while quarantined", row: res{quarantined: true}},
		"Orphaned":    {reason: "a no-op while orphaned", row: res{frozen: ptr(t0.Add(time.Hour))}},
		"Deleting":    {reason: "a no-op while deleting", row: res{deleting: true}},
	}
	for name, tc := range cases {
		id := f.res(tc.row)
		got := f.bool(`SELECT resync_resource($1)`, id)
		require.Equal(t, tc.want, got, "%s: %s", name, tc.reason)
		tasks := f.tasks(id)
		if tc.want {
			require.Len(t, tasks, 1, name)
			require.Equal(t, tc.wantTrigger, tasks[0].trigger, "%s: %s", name, tc.reason)
		} else {
			require.Empty(t, tasks, "%s: %s", name, tc.reason)
		}
	}
	require.False(t, f.bool(`SELECT resync_resource(gen_random_uuid())`), "a missing row is a no-op")

	bom := f.res(res{kind: "bom", gen: 2, composedGen: 2})
	require.True(t, f.bool(`SELECT resync_resource($1)`, bom))
	require.Equal(t, 1, f.int(`SELECT composed_gen FROM resources WHERE id = $1`, bom),
		"the kind's resync_recomposes policy applies to a manual resync too")
}
