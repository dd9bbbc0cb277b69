package maintenance_test

import (
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
)

// crashSentinel empties the crash rewalk's UNLOGGED tables, as crash
// recovery does (core/control's TestReaper_RollsUpAfterACrashTheCompositesWhoseRollupWasQueued
// crashes a real server).
func (f *fixture) crashSentinel() {
	f.t.Helper()
	f.exec(`DELETE FROM rollup_rewalk`)
	f.exec(`DELETE FROM rollup_rewalk_cursors`)
	f.exec(`DELETE FROM work_queue`)
}

// composites makes n synced composites of kind comp (Ready), each owning
// one Ready leaf, and returns their ids sorted.
func (f *fixture) composites(n int) []string {
	f.t.Helper()
	var roots []string
	for range n {
		root := f.res(res{kind: "comp", composedGen: 1, shard: len(roots) % 256})
		f.res(res{owner: root, root: root})
		roots = append(roots, root)
	}
	sort.Strings(roots)
	return roots
}

// rewalk runs calls over rng with limit until one finishes the walk (at
// most max calls) and returns them.
func (f *fixture) rewalk(rng shard.Range, limit, most int) []maintenance.Rewalk {
	f.t.Helper()
	var calls []maintenance.Rewalk
	for range most {
		w, err := f.at(t0).RewalkRollups(ctx, rng, limit)
		require.NoError(f.t, err)
		calls = append(calls, w)
		if w.Finished {
			return calls
		}
	}
	f.t.Fatalf("the walk did not finish in %d calls: %+v", most, calls)
	return nil
}

// Without a crash since the last walk (a fresh database: the migration
// wrote the sentinel) a call pends nothing and reads one row.
func TestRewalkRollups_WithoutACrashDoesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "comp", hasComposer: true, hasRollup: true})
	f.kind(kind{name: "leaf"})
	roots := f.composites(3)
	w, err := f.at(t0).RewalkRollups(ctx, shard.All, 100)
	require.NoError(t, err)
	require.Equal(t, maintenance.Rewalk{}, w)
	for _, r := range roots {
		require.Empty(t, f.tasks(r))
	}
}

// After a crash every owner's rollup is pended again, p_max owners a call
// at most; the walk is started and finished once each, with its totals.
// A composite whose descendant still progresses is held back by the gate
// (its descendant's settle pends the rollup); an owner whose kind has no
// rollup is walked and pends nothing.
func TestRewalkRollups_PendsEveryCompositesRollupInBoundedCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "comp", hasComposer: true, hasRollup: true})
	f.kind(kind{name: "plain", hasComposer: true})
	f.kind(kind{name: "leaf"})
	roots := f.composites(20)
	held := f.res(res{kind: "comp", composedGen: 1})
	f.res(res{owner: held, root: held, lagging: true})
	plain := f.res(res{kind: "plain", composedGen: 1})
	f.res(res{owner: plain, root: plain})
	f.crashSentinel()

	calls := f.rewalk(shard.All, 3, 40)
	walked, pended := 0, 0
	for i, c := range calls {
		require.LessOrEqual(t, c.Walked, 3, "call %d walks at most its limit", i)
		require.Equal(t, i == 0, c.Started, "call %d: only the first starts the walk", i)
		require.Equal(t, i == len(calls)-1, c.Finished, "call %d: only the last finishes it", i)
		walked += c.Walked
		pended += c.Pended
	}
	last := calls[len(calls)-1]
	require.Equal(t, int64(22), last.WalkedTotal, "every owner walked once")
	require.Equal(t, int64(20), last.PendedTotal)
	require.Equal(t, 22, walked)
	require.Equal(t, 20, pended)
	require.True(t, t0.Equal(last.Since), "the walk started at %s", last.Since)
	for _, r := range roots {
		require.Equal(t, []task{{taskType: "reconcile", trigger: "childrenSettled", gen: 1}}, f.tasks(r))
	}
	require.Empty(t, f.tasks(held), "its descendant progresses: the gate holds the rollup")
	require.Empty(t, f.tasks(plain), "no rollup to pend")

	w, err := f.at(t0).RewalkRollups(ctx, shard.All, 3)
	require.NoError(t, err)
	require.Equal(t, maintenance.Rewalk{}, w, "the walk is over: back to the one probe")
}

// A crash during the walk empties its positions with the sentinel: the walk
// starts over, and the rollups the crash took again are pended again.
func TestRewalkRollups_StartsOverAfterACrashDuringTheWalk(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "comp", hasComposer: true, hasRollup: true})
	f.kind(kind{name: "leaf"})
	roots := f.composites(12)
	f.crashSentinel()
	for range 2 {
		w, err := f.at(t0).RewalkRollups(ctx, shard.All, 2)
		require.NoError(t, err)
		require.False(t, w.Finished)
	}
	f.crashSentinel()
	calls := f.rewalk(shard.All, 5, 20)
	require.True(t, calls[0].Started, "the walk starts again")
	require.Equal(t, int64(12), calls[len(calls)-1].WalkedTotal, "from the beginning")
	for _, r := range roots {
		require.Len(t, f.tasks(r), 1)
	}
}

// Each member walks the slices of its own range; the walk ends once every
// range is through, and whichever call finds the last slice gone ends it.
func TestRewalkRollups_EndsOnceEveryRangeIsWalked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "comp", hasComposer: true, hasRollup: true})
	f.kind(kind{name: "leaf"})
	roots := f.composites(10)
	f.crashSentinel()
	low, high := shard.Between(0, 127), shard.Between(128, 255)
	w, err := f.at(t0).RewalkRollups(ctx, low, 1000)
	require.NoError(t, err)
	require.True(t, w.Started)
	require.False(t, w.Finished, "the high range is not walked yet")
	w, err = f.at(t0).RewalkRollups(ctx, low, 1000)
	require.NoError(t, err)
	require.False(t, w.Finished)
	require.Zero(t, w.Walked)
	w, err = f.at(t0).RewalkRollups(ctx, high, 1000)
	require.NoError(t, err)
	require.False(t, w.Started)
	require.True(t, w.Finished)
	require.Equal(t, int64(10), w.WalkedTotal)
	for _, r := range roots {
		require.Len(t, f.tasks(r), 1)
	}
}

// Without a crash the pass reads the sentinel's one row and nothing else;
// during a walk every owner is reached by an index probe of
// idx_resources_owner, never a scan of resources, also in the generic
// plans a session keeps after plpgsql's first five custom ones.
func TestRewalkRollups_IdleReadsOneRowAndTheWalkProbesTheOwnerIndex(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "comp", hasComposer: true, hasRollup: true})
	f.kind(kind{name: "leaf"})
	f.composites(30)
	conn, plans := f.planConn()
	const call = `SELECT walked FROM rewalk_rollups(0, 255, 4, $1)`
	var walked int
	require.NoError(t, conn.QueryRow(ctx, call, t0).Scan(&walked))
	require.Zero(t, walked)
	idle := plans()
	require.Len(t, idle, 2, "the sentinel's read, and the call: %v", idle)
	require.Contains(t, idle[0], "on rollup_rewalk")
	require.NotContains(t, strings.Join(idle, "\n"), "resources")

	f.crashSentinel()
	for i := range 9 {
		require.NoError(t, conn.QueryRow(ctx, call, t0).Scan(&walked), "call %d", i+1)
		all := strings.Join(plans(), "\n")
		require.NotContains(t, all, "Seq Scan on resources", "call %d", i+1)
		if walked > 0 {
			require.Contains(t, all, "idx_resources_owner", "call %d", i+1)
		}
	}
}

// Members walking at once — over overlapping ranges, as during a re-tile —
// start the walk once, end it once, and pend every composite's rollup: a
// slice one holds is skipped by the other, and the ends are ordered by the
// sentinel's row lock.
func TestRewalkRollups_ConcurrentWalkersStartAndEndItOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "comp", hasComposer: true, hasRollup: true})
	f.kind(kind{name: "leaf"})
	roots := f.composites(60)
	f.crashSentinel()
	ranges := []shard.Range{shard.All, shard.Between(64, 255), shard.Between(0, 191)}
	results := make(chan []maintenance.Rewalk, len(ranges))
	for _, rng := range ranges {
		go func() {
			var calls []maintenance.Rewalk
			defer func() { results <- calls }()
			for range 200 {
				w, err := f.at(t0).RewalkRollups(ctx, rng, 2)
				if err != nil {
					t.Error(err)
					return
				}
				calls = append(calls, w)
				var on bool
				if err := f.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM rollup_rewalk WHERE started_at IS NOT NULL)`).Scan(&on); err != nil {
					t.Error(err)
					return
				}
				if !on && w.Walked == 0 {
					return
				}
			}
		}()
	}
	started, finished := 0, 0
	var total int64
	for range ranges {
		for _, c := range <-results {
			if c.Started {
				started++
			}
			if c.Finished {
				finished++
				total = c.WalkedTotal
			}
		}
	}
	require.Equal(t, 1, started)
	require.Equal(t, 1, finished)
	require.Equal(t, int64(60), total, "each owner walked once")
	for _, r := range roots {
		require.Len(t, f.tasks(r), 1)
	}
}
