package maintenance_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/db/pgtest"
)

// A finalizer the task did not own stays, and the drain leaves that row to
// the reaper's sweep: queued again at once, a finalizer no Deleter strips
// would go round the worker without a pause.
func TestTeardown_ARowKeepingAForeignFinalizerWaitsForTheSweep(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	id := f.res(res{kind: "net", name: "n"})
	f.int(`SELECT request_resource_deletion($1, $2)`, id, t0)
	f.exec(`UPDATE resources SET finalizers = finalizers || '{other.example/keep}'::text[] WHERE id = $1`, id)

	require.Equal(t, []string{id}, f.work(t0.Add(time.Second), pipeline.TaskDelete, `null`, "net"))
	require.True(t, f.exists(id), "a finalizer is left")
	require.Empty(t, f.tasks(id), "the drain queues no second teardown")
	require.Equal(t, "Deleting", f.phase(id))
}

// Marking a tree for deletion is a heap-only update of each of its rows: no
// index of resources names the mark (the backstop's walk reads the marked
// rows' phase entries), so a fleet's delete request writes no index entry
// on resources, where it wrote one in every index for every row.
func TestTeardown_MarkingATreeIsHeapOnly(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	root := f.res(res{kind: "net", name: "root", finalizers: []string{"net.example/teardown"}})
	for i := range 100 {
		f.res(res{kind: "net", name: fmt.Sprintf("c%d", i), shard: i % 256, owner: root, root: root,
			finalizers: []string{"net.example/teardown"}})
	}
	tx, err := f.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	// One transaction: the backend's counts are its own until it reports them.
	const updates = `SELECT pg_stat_get_xact_tuples_updated('resources'::regclass)::int,
	                        pg_stat_get_xact_tuples_hot_updated('resources'::regclass)::int`
	var upd0, hot0, upd1, hot1, n int
	require.NoError(t, tx.QueryRow(ctx, updates).Scan(&upd0, &hot0))
	require.NoError(t, tx.QueryRow(ctx, `SELECT request_resource_deletion($1, $2)`, root, t0).Scan(&n))
	require.NoError(t, tx.QueryRow(ctx, updates).Scan(&upd1, &hot1))
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 101, upd1-upd0, "the root and its 100 children are marked")
	require.GreaterOrEqual(t, 10*(hot1-hot0), 9*(upd1-upd0),
		"heap-only marks, all but the few that find no room left on their page: %d of %d", hot1-hot0, upd1-upd0)
	require.Equal(t, 101, f.int(`SELECT count(*) FROM resources WHERE phase = 'Deleting'`))
	require.Equal(t, 101, f.int(`SELECT count(*) FROM resource_phases WHERE phase = 'Deleting'`),
		"the backstop's walk finds them by their phase entries")
}

// Two drains at once finish the last two dependents of one upstream: each
// locks the upstream first (drain_lock), so the second waits for the
// first's commit and then sees both dependents gone. Without the lock each
// would see the other's dependent still there, and the upstream would wait
// for the reaper.
func TestTeardown_ConcurrentDrainsOfTheLastTwoDependentsAdvanceTheUpstream(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	up := f.res(res{kind: "net", name: "up", shard: 100})
	b := f.res(res{kind: "net", name: "b", shard: 40})  // partition 2
	c := f.res(res{kind: "net", name: "c", shard: 200}) // partition 12
	f.dep(b, up)
	f.dep(c, up)
	names := map[string]string{up: "up", b: "b", c: "c"}
	require.Equal(t, 3, f.int(`SELECT request_resource_deletion($1, $2)`, up, t0))
	require.Equal(t, []string{"b", "c"}, f.queuedDeletes(names))

	p := f.pipe(t0)
	tasks, err := p.Claim(ctx, pipeline.Lease{WorkerID: "w", Lo: 0, Hi: 255},
		pipeline.Batch{Kind: "net", Version: "v1", TaskType: pipeline.TaskDelete, Max: 10})
	require.NoError(t, err)
	require.Len(t, tasks, 2)
	for _, task := range tasks {
		require.NoError(t, p.AppendOutbox(ctx, task.Result(nil)))
	}

	first, err := f.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(ctx) }()
	var n int
	require.NoError(t, first.QueryRow(ctx, `SELECT drain_outbox_batch(10, 32, 47, $1)`, t0).Scan(&n))
	require.Equal(t, 1, n, "the first drain takes b")

	second, err := f.db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = second.Rollback(ctx) }()
	var pid int
	require.NoError(t, second.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	done := make(chan error, 1)
	go func() {
		var m int
		err := second.QueryRow(ctx, `SELECT drain_outbox_batch(10, 192, 207, $1)`, t0).Scan(&m)
		if err == nil && m != 1 {
			err = fmt.Errorf("the second drain popped %d results, want c alone", m)
		}
		done <- err
	}()
	// The second drain must wait on the upstream's lock while the first is
	// open (or, without the lock, have finished already).
	deadline := time.Now().Add(10 * time.Second)
	blocked := false
	for !blocked && time.Now().Before(deadline) {
		select {
		case err := <-done:
			require.NoError(t, err)
			require.Fail(t, "the second drain finished while the first held the upstream: it did not lock it")
		default:
		}
		blocked = f.bool(`SELECT coalesce((SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = $1), false)`, pid)
		if !blocked {
			time.Sleep(10 * time.Millisecond)
		}
	}
	require.True(t, blocked, "the second drain waits for the upstream's lock")
	require.NoError(t, first.Commit(ctx))
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		require.Fail(t, "the second drain did not finish after the first committed")
	}
	require.NoError(t, second.Commit(ctx))

	require.Equal(t, []string{"up"}, f.queuedDeletes(names), "the upstream's teardown is queued by the second drain")
	require.False(t, f.exists(b))
	require.False(t, f.exists(c))
}

// The backstop reads a bounded window of the marked rows (20 × p_max) from a
// random shard on: one call never reads the whole marked set, and calls
// together cover the range, so a row the events left behind is found.
func TestSweepDeletable_ReadsAWindowAndCoversTheRangeOverCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	for i := range 200 { // marked but blocked: each still owns a live child
		owner := f.res(res{shard: i * 255 / 199, deleting: true})
		f.res(res{shard: i * 255 / 199, owner: owner})
	}
	target := f.res(res{shard: 128, deleting: true}) // unblocked, no finalizer: the backstop removes it

	read := func() (advanced, indexRows int) {
		tx, err := f.db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		// The backend's counts not yet reported (they add up across
		// transactions until they are), before and after the call.
		const entries = `SELECT pg_stat_get_xact_tuples_returned('idx_resource_phases_deleting'::regclass)::int`
		var before int
		require.NoError(t, tx.QueryRow(ctx, entries).Scan(&before))
		require.NoError(t, tx.QueryRow(ctx, `SELECT sweep_deletable(0, 255, 1, $1)`, t0).Scan(&advanced))
		require.NoError(t, tx.QueryRow(ctx, entries).Scan(&indexRows))
		indexRows -= before
		require.NoError(t, tx.Commit(ctx))
		return advanced, indexRows
	}
	calls := 0
	for f.exists(target) {
		calls++
		require.LessOrEqual(t, calls, 300, "the backstop never reached the row in 300 calls")
		advanced, rows := read()
		require.LessOrEqual(t, advanced, 1, "at most p_max rows advanced")
		require.LessOrEqual(t, rows, 1+20, "the idle gate's probe and a window of 20 × p_max marked rows, of 201")
	}
	require.Equal(t, 200, f.int(`SELECT count(*) FROM resources WHERE deletion_requested_at IS NOT NULL`),
		"the blocked rows stay")

	n, err := f.at(t0).SweepDeletable(ctx, shard.All, 1000)
	require.NoError(t, err)
	require.Zero(t, n, "nothing left to advance")
}

// Removing rows removes their label rows by key, in every statement of a
// session: a fleet's teardown deletes a few hundred rows a statement from a
// table of millions of labels, where a compose's children share their label
// values and their created_at (one statement's now()), so only the fourth
// column of the key tells them apart. Two plans the trigger's join got in
// teardowns read far more than its rows: a merge join over the whole label
// index (1M: 1.8 million index entries a statement) and, with that fixed,
// a probe by the key's first two columns with the rest as a filter (20k:
// 250 index entries a label). Each session here deletes 1,000 rows a round:
// one with the planner's defaults, one with nested loops off, so a planner
// left to choose takes the join (the trigger written plainly then reads all
// 40,000 labels for each 1,000 rows); the trigger must probe by its whole
// key in both.
func TestTeardown_RemovingLabeledRowsProbesTheirLabelsByKey(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	f.exec(`INSERT INTO resources (kind, version, name, labels, shard_id)
	        SELECT 'leaf', 'v1', 'l' || i, jsonb_build_object('team', 't' || (i % 50), 'tier', 'leaf'), i % 256
	          FROM generate_series(1, 20000) i`)
	f.exec(`ANALYZE`)
	require.Equal(t, 40000, f.int(`SELECT count(*) FROM resource_labels`))

	// The backend's counts not yet reported, before and after each delete:
	// label rows returned by Seq Scans of the table, and the label index's
	// pages read (not its entries returned: a scan by the key's last columns
	// checks every entry inside the index and returns only its match).
	const entries = `SELECT (pg_stat_get_xact_tuples_returned('resource_labels'::regclass)
	                        + pg_stat_get_xact_blocks_fetched('resource_labels_pkey'::regclass))::int`
	deleted := 0
	deleteRound := func(conn *pgxpool.Conn, session string, round int) {
		// One transaction: the backend's counts are its own until it reports them.
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		var before, after int
		require.NoError(t, tx.QueryRow(ctx, entries).Scan(&before))
		tag, err := tx.Exec(ctx, `DELETE FROM resources WHERE name IN (SELECT 'l' || i FROM generate_series($1::int, $1::int + 999) i)`, deleted+1)
		require.NoError(t, err)
		require.EqualValues(t, 1000, tag.RowsAffected())
		require.NoError(t, tx.QueryRow(ctx, entries).Scan(&after))
		require.NoError(t, tx.Commit(ctx))
		deleted += 1000
		require.LessOrEqual(t, after-before, 4*2000,
			"%s, round %d: one descent of the label index (three levels, a leaf's neighbour at most) per label of the 1,000 rows", session, round)
	}
	for _, session := range []string{"RESET enable_nestloop", "SET enable_nestloop = off"} {
		conn, err := f.db.Acquire(ctx) // one session: its trigger plans are kept across statements
		require.NoError(t, err)
		t.Cleanup(conn.Release)
		_, err = conn.Exec(ctx, session)
		require.NoError(t, err)
		for round := range 8 { // past plpgsql's five custom plans, so a kept generic plan is measured too
			deleteRound(conn, session, round)
		}
		_, err = conn.Exec(ctx, `RESET enable_nestloop`)
		require.NoError(t, err)
	}
	require.Equal(t, 40000-2*deleted, f.int(`SELECT count(*) FROM resource_labels`), "their label rows are gone, no other")
}

// A session's plans of the teardown's probes, made while nothing was marked
// (a fresh install, or any quiet hour), still find each candidate by its
// primary key once most of the fleet is marked: a plan that walks the marked
// rows (through an index of them, filtered by id: the cheapest plan while
// they are few) read every marked row for each candidate, and made a 1M
// fleet's delete requests take minutes. The rows read are counted on both
// tables that index marked rows or phases, by scans and by every index.
func TestTeardown_ProbesStayByKeyWhenTheMarkedSetGrows(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	f.exec(`INSERT INTO resources (kind, version, name, shard_id)
	        SELECT 'leaf', 'v1', 'l' || i, i % 256 FROM generate_series(1, 10000) i`)
	f.exec(`ANALYZE`)
	conn, err := f.db.Acquire(ctx) // one session: its plpgsql plans are kept across calls
	require.NoError(t, err)
	defer conn.Release()
	probe := `SELECT teardown_advance($1::uuid[], 0, 255, $2, NULL)`
	leafNames := names(1, 10)
	var ids []string
	require.NoError(t, f.db.QueryRow(ctx, `SELECT array_agg(id::text) FROM resources WHERE name = ANY ($1)`, leafNames).Scan(&ids))
	require.Len(t, ids, 10)
	for range 8 { // past plpgsql's five custom plans: the session keeps its generic plan
		var n int
		require.NoError(t, conn.QueryRow(ctx, probe, ids, t0).Scan(&n))
		require.Zero(t, n, "nothing is marked")
	}
	f.exec(`UPDATE resources SET deletion_requested_at = $1 WHERE name <> ALL ($2)`, t0, leafNames[:5])

	const entries = `SELECT (sum(pg_stat_get_xact_tuples_returned(i.indexrelid))
	                         + pg_stat_get_xact_tuples_returned('resources'::regclass)
	                         + pg_stat_get_xact_tuples_returned('resource_phases'::regclass))::int
	                    FROM pg_index i WHERE i.indrelid IN ('resources'::regclass, 'resource_phases'::regclass)`
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var before, after, n int
	require.NoError(t, tx.QueryRow(ctx, entries).Scan(&before))
	require.NoError(t, tx.QueryRow(ctx, probe, ids, t0).Scan(&n))
	require.NoError(t, tx.QueryRow(ctx, entries).Scan(&after))
	require.Equal(t, 5, n, "the five marked candidates are removed")
	require.LessOrEqual(t, after-before, 50, "the candidates' and the removed rows' probes, no walk of the 9,995 marked rows")
	require.NoError(t, tx.Commit(ctx))
}

// A fleet's teardown removes rows a few hundred a statement, mostly in the
// drain, whose session plans every statement per call (force_custom_plan).
// Each removed row fires five foreign keys' ON DELETE actions — Postgres's
// own saved statements, one run a row each — and they must keep their plans:
// planned again for every row, they cost more than their probes (0.11 ms a
// row in a 20k teardown under the drain's setting; 0.025 ms a row in a 1M
// teardown under auto, which kept planning the children's action). The rows
// are a fleet's, analyzed: leaves of 20 owners, so the owner column's common
// values are those owners, a plan for a leaf's id expects no child and one
// for any id expects an owner's ten, and auto, seeing its plans for the
// call cheaper than the kept one, planned that action for every row.
// The owner's and the edges' references cascade per statement instead
// (resources_cascade_delete): once a statement, not once a row. Counting
// plans takes pg_stat_statements with track_planning, so the test has a
// cluster of its own.
func TestTeardown_RemovedRowsForeignKeyActionsKeepTheirPlans(t *testing.T) {
	t.Parallel()
	url := pgtest.BenchURL(t, map[string]string{"shared_preload_libraries": "pg_stat_statements",
		"pg_stat_statements.track": "all", "pg_stat_statements.track_planning": "on"})
	f := &fixture{t: t, db: pgtest.PoolFor(t, url)}
	f.exec(`CREATE EXTENSION pg_stat_statements`)
	f.kind(kind{name: "leaf"})
	f.exec(`INSERT INTO resources (kind, version, name, shard_id)
	        SELECT 'leaf', 'v1', 'owner-' || i, i FROM generate_series(1, 20) i`)
	f.exec(`INSERT INTO resources (kind, version, name, shard_id, owner_id, deletion_requested_at)
	        SELECT 'leaf', 'v1', 'l' || i, i % 256, o.id, $1
	          FROM generate_series(1, 200) i JOIN resources o ON o.name = 'owner-' || (i % 20 + 1)`, t0)
	f.exec(`ANALYZE resources`)

	conn, err := f.db.Acquire(ctx) // one session, planning as the drain's does
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, `SET plan_cache_mode = force_custom_plan`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_stat_statements_reset()`)
	require.NoError(t, err)
	for round := range 4 { // 50 rows a statement
		var n int
		require.NoError(t, conn.QueryRow(ctx, `SELECT teardown_advance(ARRAY(SELECT id FROM resources WHERE name = ANY ($1)), 0, 255, $2, NULL)`,
			names(round*50+1, 50), t0).Scan(&n))
		require.Equal(t, 50, n, "round %d: the marked, finalizer-free rows are removed", round)
	}
	require.Equal(t, 20, f.int(`SELECT count(*) FROM resources`), "the owners stay")

	rows, err := f.db.Query(ctx, `SELECT query, calls, plans FROM pg_stat_statements
	                               WHERE query LIKE 'DELETE FROM ONLY %' ORDER BY query`)
	require.NoError(t, err)
	type action struct {
		query        string
		calls, plans int64
	}
	var actions []action
	for rows.Next() {
		var a action
		require.NoError(t, rows.Scan(&a.query, &a.calls, &a.plans))
		actions = append(actions, a)
	}
	require.NoError(t, rows.Err())
	require.Len(t, actions, 5, "one referential action for each foreign key to resources: %+v", actions)
	for _, a := range actions {
		require.EqualValues(t, 200, a.calls, "%s: once a removed row", a.query)
		require.LessOrEqual(t, a.plans, int64(10), "%s: planned a few times, then kept, not once a row", a.query)
	}
	var edgeDeletes []int64
	require.NoError(t, f.db.QueryRow(ctx, `SELECT array_agg(calls ORDER BY query) FROM pg_stat_statements
	                                        WHERE query LIKE 'DELETE FROM resource_deps d WHERE d.%'`).Scan(&edgeDeletes))
	require.Equal(t, []int64{4, 4}, edgeDeletes, "the edges' cascade, by either end: once a statement, not once a row")
}

// names are the fixture names l<from> … l<from+n-1>.
func names(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("l%d", from+i)
	}
	return out
}
