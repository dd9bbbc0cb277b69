package maintenance_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
)

// Each case lives in its own shard and runs the pass over just that shard, so
// the cases share one database and prove the range filter as they go.
func TestRequeueFailedAndPending_GatesLaggingRows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	f.kind(kind{name: "bom", hasComposer: true, hasRollup: true})
	const retry = time.Minute
	old := t0.Add(-2 * retry)

	cases := map[string]struct {
		reason string
		setup  func(shard int) string // returns the row to watch
		want   bool                   // a reconcile task was enqueued
	}{
		"LaggingPastWindow": {
			reason: "a lagging row with no task past its retry window is the crash-recovery case",
			setup:  func(s int) string { return f.res(res{shard: s, gen: 2, lagging: true, updatedAt: old}) },
			want:   true,
		},
		"LaggingInsideWindow": {
			reason: "a row touched within the retry window is left to the reactive path",
			setup:  func(s int) string { return f.res(res{shard: s, gen: 2, lagging: true, updatedAt: t0.Add(-retry / 2)}) },
		},
		"Settled": {
			reason: "a synced row needs nothing",
			setup:  func(s int) string { return f.res(res{shard: s, updatedAt: old}) },
		},
		"TransientFailure": {
			reason: "a non-terminal failure retries after its window",
			setup:  func(s int) string { return f.res(res{shard: s, gen: 3, failed: true, updatedAt: old}) },
			want:   true,
		},
		"TerminalFailure": {
			reason: "a terminal failure for the live spec stops retrying",
			setup: func(s int) string {
				return f.res(res{shard: s, gen: 3, failed: true, terminal: true, updatedAt: old})
			},
		},
		"StaleTerminalFailure": {
			reason: "a spec bump past a terminal failure invalidates it: the new generation is tried",
			setup: func(s int) string {
				return f.res(res{shard: s, gen: 4, lagging: true, failureGen: 3, terminal: true, updatedAt: old})
			},
			want: true,
		},
		"Quarantined": {
			reason: "a quarantined row is frozen from every scheduler",
			setup: func(s int) string {
				return f.res(res{shard: s, gen: 2, lagging: true, quarantined: true, updatedAt: old})
			},
		},
		"Orphaned": {
			reason: "an orphaned row in its grace window is frozen too",
			setup: func(s int) string {
				return f.res(res{shard: s, gen: 2, lagging: true, frozen: ptr(t0.Add(time.Hour)), updatedAt: old})
			},
		},
		"Deleting": {
			reason: "a row being deleted is never reconciled again",
			setup: func(s int) string {
				return f.res(res{shard: s, gen: 2, lagging: true, deleting: true, updatedAt: old})
			},
		},
		"AlreadyQueued": {
			reason: "a row with a reconcile task is in hand",
			setup: func(s int) string {
				id := f.res(res{shard: s, gen: 2, lagging: true, updatedAt: old})
				f.task(id, "reconcile", "", time.Time{}, old)
				return id
			},
			want: true, // the existing row stays; the pass adds none (checked below)
		},
		"UpstreamLagging": {
			reason: "schedule_eligible's gate holds a dependent until its upstream is synced",
			setup: func(s int) string {
				up := f.res(res{shard: 200 + s, gen: 2, lagging: true, updatedAt: t0})
				id := f.res(res{shard: s, gen: 2, lagging: true, updatedAt: old})
				f.dep(id, up)
				return id
			},
		},
		"RootWithFailedChild": {
			reason: "a failed descendant does not hold its root back: the rollup reports it",
			setup: func(s int) string {
				root := f.res(res{kind: "bom", shard: s, gen: 2, composedGen: 2, lagging: true, updatedAt: old})
				f.res(res{shard: 200 + s, gen: 1, failed: true, terminal: true, owner: root, root: root, updatedAt: t0})
				return root
			},
			want: true,
		},
		"RootWithProgressingChild": {
			reason: "a still-progressing descendant holds its root back",
			setup: func(s int) string {
				root := f.res(res{kind: "bom", shard: s, gen: 2, composedGen: 2, lagging: true, updatedAt: old})
				f.res(res{shard: 200 + s, gen: 1, lagging: true, owner: root, root: root, updatedAt: t0})
				return root
			},
		},
	}

	sh := 0
	for name, tc := range cases {
		sh++
		id := tc.setup(sh)
		before := len(f.tasks(id))
		n, err := f.at(t0).RequeueFailedAndPending(ctx, shard.Between(sh, sh), 100, retry)
		require.NoError(t, err, name)
		got := f.tasks(id)
		if name == "AlreadyQueued" {
			require.Equal(t, 0, n, "%s: %s", name, tc.reason)
			require.Len(t, got, before, "%s: %s", name, tc.reason)
			continue
		}
		require.Equal(t, tc.want, len(got) == 1 && got[0].taskType == "reconcile", "%s: %s", name, tc.reason)
		require.Equal(t, len(got), n, "%s: count", name)
	}
}

func TestRequeueFailedAndPending_ScansOnlyItsRangeAndCapsAtMax(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	old := t0.Add(-time.Hour)
	for s := 10; s < 20; s++ {
		f.res(res{shard: s, gen: 2, lagging: true, updatedAt: old.Add(time.Duration(s) * time.Second)})
	}
	store := f.at(t0)
	n, err := store.RequeueFailedAndPending(ctx, shard.Between(12, 17), 4, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 4, n, "at most p_max per call")
	n, err = store.RequeueFailedAndPending(ctx, shard.Between(12, 17), 100, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 2, n, "the next call picks up the rest of the range")
	require.Equal(t, 6, f.int(`SELECT count(*) FROM work_queue`), "rows outside [12,17] untouched")
	require.Equal(t, 6, f.int(`SELECT count(*) FROM work_queue WHERE shard_id BETWEEN 12 AND 17`))
}

// A backlog's oldest lagging rows are the ones already queued, and the pass
// does not move them; the walk must resume past them tick by tick (the old
// walk began at the oldest entry every tick and never reached a row behind
// its budget's worth of queued ones), and start again at a shard's end. The
// queued rows share one since, as a drain batch's do: the position is exact
// inside such a run.
func TestRequeueFailedAndPending_WalkResumesPastAQueuedBacklog(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	const sh, queued, batch = 30, 100, 2
	old := t0.Add(-time.Hour)
	for range queued {
		id := f.res(res{shard: sh, gen: 2, lagging: true, updatedAt: old})
		f.task(id, "reconcile", "", time.Time{}, old)
	}
	lost := f.res(res{shard: sh, gen: 2, lagging: true, updatedAt: old.Add(time.Second)})
	store := f.at(t0)
	// ceil(4 × batch / 1 shard) is under the floor of 8 entries a call
	budget := 8
	reach := func(what string) int {
		t.Helper()
		for call := 1; call <= queued/budget+2; call++ {
			n, err := store.RequeueFailedAndPending(ctx, shard.Between(sh, sh), batch, time.Minute)
			require.NoError(t, err)
			if n > 0 {
				require.Equal(t, 1, n, "%s: only the lost row lacks a task", what)
				require.Len(t, f.tasks(lost), 1, "%s: the lost row is queued", what)
				return call
			}
		}
		t.Fatalf("%s: the lost row was never reached behind %d queued rows", what, queued)
		return 0
	}
	first := reach("first cycle")
	require.Greater(t, first, queued/budget, "each call examines at most its budget of entries")
	// The lost row is queued again and the walk sits past the shard's end:
	// the next call wraps; a second loss is found from the oldest entry on.
	f.exec(`DELETE FROM work_queue WHERE resource_id = $1`, lost)
	f.exec(`UPDATE resource_phases SET since = $2 WHERE id = $1`, lost, old.Add(time.Second))
	reach("after the wrap")
	require.Equal(t, queued+1, f.int(`SELECT count(*) FROM work_queue WHERE shard_id = $1`, sh))
}

// A crash restart of Postgres empties the UNLOGGED queue, and the catch-up
// rebuilds it from the resources: synced_gen < generation. An operation's
// task is not in those columns: its operation stayed Pending (or Running)
// for good, never run and never refused. The catch-up queues a Pending
// operation's task again (it never ran), and fails a Running one, saying
// why (it may have run: a verb is not run twice unasked).
func TestRequeueFailedAndPending_RebuildsTheTasksOfOpenOperations(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	op := func(shard int, state string) (string, string) {
		id := f.res(res{shard: shard})
		var op string
		require.NoError(t, f.db.QueryRow(ctx, `INSERT INTO resource_operations (resource_id, verb, state, created_at, updated_at)
		                                        VALUES ($1, 'flip', $2, $3, $3) RETURNING id::text`,
			id, state, t0.Add(-time.Hour)).Scan(&op))
		return id, op
	}
	pendingRes, pending := op(1, "Pending")
	runningRes, running := op(2, "Running")
	_, elsewhere := op(40, "Pending") // another reaper's shard
	queuedRes, queued := op(3, "Pending")
	f.exec(`INSERT INTO work_queue (resource_id, task_type, op_id, shard_id, kind, version, generation, trigger)
	        SELECT id, 'operate', $2, shard_id, kind, version, generation, 'operation' FROM resources WHERE id = $1`, queuedRes, queued)

	n, err := f.at(t0).RequeueFailedAndPending(ctx, shard.Between(0, 15), 100, time.Minute)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the Pending operation's task is queued again")

	state := func(op string) (string, string) {
		var s, msg string
		require.NoError(t, f.db.QueryRow(ctx, `SELECT state, coalesce(error, '') FROM resource_operations WHERE id = $1`, op).Scan(&s, &msg))
		return s, msg
	}
	require.Equal(t, []task{{taskType: "operate", trigger: "operation", gen: 1}}, f.tasks(pendingRes))
	s, _ := state(pending)
	require.Equal(t, "Pending", s)
	s, msg := state(running)
	require.Equal(t, "Failed", s, "a Running operation whose task is gone may have run: failed, not run again")
	require.Contains(t, msg, "lost")
	require.Empty(t, f.tasks(runningRes))
	s, _ = state(elsewhere)
	require.Equal(t, "Pending", s, "outside the range")
	require.Len(t, f.tasks(queuedRes), 1, "an operation whose task is queued is left alone")
}
