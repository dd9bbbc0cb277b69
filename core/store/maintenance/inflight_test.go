package maintenance_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/core/store/pipeline"
)

type partial struct {
	Kind    string
	RangeLo int
	N       int
}

func (f *fixture) partials() []partial {
	f.t.Helper()
	rows, err := f.db.Query(ctx, `SELECT kind, range_lo, in_flight FROM kind_inflight ORDER BY kind, range_lo`)
	require.NoError(f.t, err)
	defer rows.Close()
	var out []partial
	for rows.Next() {
		var p partial
		require.NoError(f.t, rows.Scan(&p.Kind, &p.RangeLo, &p.N))
		out = append(out, p)
	}
	return out
}

func TestRecountInflight_RewritesTheRangePartialFromTheQueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "vpc", maxInflight: 5})
	f.kind(kind{name: "leaf"})
	lease := func(kind string, shard int, leased bool) {
		id := f.res(res{kind: kind, shard: shard, gen: 2, lagging: true})
		w := ""
		if leased {
			w = "w"
		}
		f.task(id, "reconcile", w, t0, t0)
	}
	// Truth: 3 vpc leased in [0,15], 2 in [16,31]; pending and uncapped rows don't count.
	for _, s := range []int{1, 7, 15} {
		lease("vpc", s, true)
	}
	lease("vpc", 2, false)
	lease("leaf", 3, true)
	for _, s := range []int{16, 31} {
		lease("vpc", s, true)
	}
	// Drift: the claimers' hints say 9 in [0,15] (two workers' partials), 1 in [16,31].
	f.exec(`INSERT INTO kind_inflight (kind, version, range_lo, in_flight) VALUES
	        ('vpc', 'v1', 0, 4), ('vpc', 'v1', 8, 5), ('vpc', 'v1', 16, 1)`)

	store := maintenance.New(f.db)
	n, err := store.RecountInflight(ctx, shard.Between(0, 15))
	require.NoError(t, err)
	require.Equal(t, 1, n, "one partial per capped kind")
	require.Empty(t, cmp.Diff([]partial{{"vpc", 0, 3}, {"vpc", 16, 1}}, f.partials()),
		"every partial keyed inside [0,15] collapses into one true count; [16,31] is another reaper's")

	_, err = store.RecountInflight(ctx, shard.Between(16, 31))
	require.NoError(t, err)
	require.Empty(t, cmp.Diff([]partial{{"vpc", 0, 3}, {"vpc", 16, 2}}, f.partials()))
	require.Equal(t, 5, f.int(`SELECT sum(in_flight)::int FROM kind_inflight WHERE kind = 'vpc'`),
		"disjoint reaper ranges sum to the exact global count")

	f.exec(`UPDATE work_queue SET worker_id = NULL WHERE shard_id = 16`)
	_, err = store.RecountInflight(ctx, shard.Between(16, 31))
	require.NoError(t, err)
	require.Empty(t, cmp.Diff([]partial{{"vpc", 0, 3}, {"vpc", 16, 1}}, f.partials()),
		"a completion or reaped lease heals on the next recount")
}

func TestRecountInflight_IsANoOpWithoutCappedKinds(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	id := f.res(res{gen: 2, lagging: true})
	f.task(id, "reconcile", "w", t0, t0)
	f.exec(`INSERT INTO kind_inflight (kind, version, range_lo, in_flight) VALUES ('leaf', 'v1', 0, 3)`)
	n, err := maintenance.New(f.db).RecountInflight(ctx, shard.All)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, []partial{{"leaf", 0, 3}}, f.partials(), "untouched")
}

// The cap end to end: four claimers on disjoint ranges race for a kind capped
// at 5 and lease exactly 5 between them; completions the claimers never
// decrement (drift) starve the pool until recount_inflight rewrites the
// partials from the queue, after which the pool refills to the cap again.
func TestRecountInflight_HealsDriftUnderACapOfFiveAcrossFourClaimers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.needs("claim_budget")
	f.kind(kind{name: "vpc", maxInflight: 5})
	for i := range 40 {
		id := f.res(res{kind: "vpc", shard: (i * 37) % 64, gen: 2, lagging: true})
		f.task(id, "reconcile", "", time.Time{}, t0.Add(-time.Minute))
	}
	p := f.pipe(t0)
	claimAll := func() int {
		var wg sync.WaitGroup
		var mu sync.Mutex
		total := 0
		for c := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				tasks, err := p.Claim(ctx, pipeline.Lease{WorkerID: fmt.Sprintf("claimer-%d", c), Lo: c * 16, Hi: c*16 + 15},
					pipeline.Batch{Kind: "vpc", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 10})
				assert.NoError(t, err)
				mu.Lock()
				total += len(tasks)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return total
	}
	leased := func() int { return f.int(`SELECT count(*) FROM work_queue WHERE worker_id IS NOT NULL`) }

	require.Equal(t, 5, claimAll(), "one global pool of 5 across every claimer's range")
	require.Equal(t, 5, leased())
	require.Zero(t, claimAll(), "the pool is spent")

	// Three tasks finish, but nobody decrements: the partials still say 5.
	f.exec(`WITH done AS (SELECT shard_id, resource_id FROM work_queue WHERE worker_id IS NOT NULL LIMIT 3)
	        DELETE FROM work_queue w USING done WHERE w.shard_id = done.shard_id AND w.resource_id = done.resource_id`)
	require.Equal(t, 2, leased())
	require.Zero(t, claimAll(), "drift: the stale partials starve the pool")

	store := maintenance.New(f.db)
	for _, r := range []shard.Range{shard.Between(0, 127), shard.Between(128, 255)} { // two reapers
		_, err := store.RecountInflight(ctx, r)
		require.NoError(t, err)
	}
	require.Equal(t, 2, f.int(`SELECT sum(in_flight)::int FROM kind_inflight WHERE kind = 'vpc'`), "healed to the truth")
	require.Equal(t, 3, claimAll(), "the freed slots are claimable again, up to the cap")
	require.Equal(t, 5, leased())
}
