package control

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/migrations"
	"github.com/converge-run/converge/db/pgcluster"
	"github.com/converge-run/converge/db/pgtest"
)

// crashable is a private Postgres of one test that the test can crash: the
// package's shared cluster serves every other test, so a crash of it is out
// of the question.
type crashable struct {
	t    *testing.T
	opts pgcluster.Options
	pg   *pgcluster.Cluster
	url  string
}

// newCrashable starts a private cluster on a data directory of the test's,
// durable as production is against a crash of the server process
// (synchronous_commit on: a commit acknowledged survives it; no fsync, which
// only an OS crash needs), and migrates a database on it.
func newCrashable(t *testing.T) *crashable {
	t.Helper()
	c := &crashable{t: t, opts: pgcluster.Options{
		DataDir:  filepath.Join(t.TempDir(), "pg"),
		Settings: map[string]string{"fsync": "off", "full_page_writes": "off", "synchronous_commit": "on"},
		Logger:   zerolog.Nop(),
	}}
	pg, err := pgcluster.Start(context.Background(), c.opts)
	require.NoError(t, err)
	c.pg = pg
	t.Cleanup(func() { _ = c.pg.Stop() })
	require.NoError(t, pg.CreateDatabase(context.Background(), "converge"))
	c.url = pg.URL("converge")
	require.NoError(t, migrate.UpFS(context.Background(), c.url, migrations.FS))
	c.opts.Port = pg.Port()
	return c
}

// pool opens a pool on the database, closed at the test's end.
func (c *crashable) pool() *pgxpool.Pool { return pgtest.PoolFor(c.t, c.url) }

// crash kills the server as a power loss would its processes (SIGQUIT to
// the postmaster: an immediate shutdown, no checkpoint) and starts it again
// on the same data directory and port: crash recovery empties every
// UNLOGGED table. Pools opened before are dead.
func (c *crashable) crash() {
	c.t.Helper()
	b, err := os.ReadFile(filepath.Join(c.pg.DataDir(), "postmaster.pid"))
	require.NoError(c.t, err)
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	require.NoError(c.t, err)
	require.NoError(c.t, syscall.Kill(pid, syscall.SIGQUIT))
	_ = c.pg.Stop() // waits for the postmaster's exit
	pg, err := pgcluster.Start(context.Background(), c.opts)
	require.NoError(c.t, err)
	c.pg = pg
}

func (c *crashable) exec(db *pgxpool.Pool, sql string, args ...any) {
	c.t.Helper()
	_, err := db.Exec(context.Background(), sql, args...)
	require.NoError(c.t, err, sql)
}

// rollupTask is the trigger of id's queued reconcile ("" when none).
func rollupTask(t *testing.T, db *pgxpool.Pool, id string) string {
	t.Helper()
	var trigger string
	err := db.QueryRow(context.Background(), `SELECT coalesce(max(trigger), '') FROM work_queue
	                                           WHERE resource_id = $1 AND task_type = 'reconcile'`, id).Scan(&trigger)
	require.NoError(t, err)
	return trigger
}

// staleAfterACrash is n synced composites, Degraded while their one child
// was Reconciling, whose children's reconciles then succeeded: each child's
// drain pended its composite's rollup (trigger childrenSettled). Then
// Postgres crashes. It returns the composites and a pool on the database
// after the crash.
func staleAfterACrash(t *testing.T, c *crashable, n int) ([]string, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	db := c.pool()
	c.exec(db, `INSERT INTO kind_config (kind, version, has_composer, has_rollup) VALUES ('comp', 'v1', true, true), ('leaf', 'v1', false, false)`)
	rows, err := db.Query(ctx, `INSERT INTO resources (kind, version, name, synced_gen, composed_gen, health_ok, shard_id)
	                            SELECT 'comp', 'v1', 'root-' || i, 1, 1, false, i % 256 FROM generate_series(1, $1) i
	                            RETURNING id::text`, n)
	require.NoError(t, err)
	var roots []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		roots = append(roots, id)
	}
	require.NoError(t, rows.Err())
	c.exec(db, `INSERT INTO resources (kind, version, name, generation, synced_gen, owner_id, root_id, shard_id)
	            SELECT 'leaf', 'v1', 'child-' || r.name, 2, 1, r.id, r.id, (r.shard_id + 1) % 256
	              FROM resources r WHERE r.kind = 'comp'`)
	c.exec(db, `SELECT schedule_eligible(array_agg(id)) FROM resources WHERE kind = 'leaf'`)

	p := pipeline.New(db)
	tasks, err := p.Claim(ctx, pipeline.Lease{WorkerID: "worker", Lo: 0, Hi: 255},
		pipeline.Batch{Kind: "leaf", Version: "v1", TaskType: pipeline.TaskReconcile, Max: n})
	require.NoError(t, err)
	require.Len(t, tasks, n)
	for _, task := range tasks {
		require.NoError(t, p.AppendOutbox(ctx, task.Result(json.RawMessage(`{}`))))
	}
	drained, err := p.DrainOutboxBatch(ctx, n, 0, 255)
	require.NoError(t, err)
	require.Equal(t, n, drained)
	for _, root := range roots {
		require.Equal(t, "childrenSettled", rollupTask(t, db, root), "the child's settle pended the root's rollup")
	}

	c.crash()
	db = c.pool()
	stale := 0
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM resources r
	                                      WHERE r.kind = 'comp' AND r.phase = 'Degraded'
	                                        AND NOT EXISTS (SELECT 1 FROM resources c WHERE c.owner_id = r.id AND c.phase <> 'Ready')`).
		Scan(&stale))
	require.Equal(t, n, stale, "every composite is stale: Degraded over a Ready child, its rollup owed")
	require.Zero(t, queued(t, db), "the crash emptied the queue")
	return roots, db
}

// queued counts the queue's rows.
func queued(t *testing.T, db *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM work_queue`).Scan(&n))
	return n
}

// A composite that is synced (Degraded here: its child was Reconciling)
// has its rollup pended by the drain that settles the child. The queue is
// UNLOGGED: a crash restart of Postgres empties it, and nothing durable said
// the rollup was owed — the composite is not lagging its own spec, so the
// catch-up of lagging rows passes it by. Without the crash rewalk it stayed
// Degraded over a Ready child until something else touched it. The reaper's
// catch-up after the crash pends its rollup again, a bounded batch a tick,
// and logs the walk's start and end once each.
func TestReaper_RollsUpAfterACrashTheCompositesWhoseRollupWasQueued(t *testing.T) {
	t.Parallel()
	c := newCrashable(t)
	roots, db := staleAfterACrash(t, c, 6)
	var logs testlog.Buffer
	r := &Reaper{Maintenance: maintenance.New(db), Shards: allShards(), Log: zerolog.New(&logs), Max: 4}
	r.TestSignals.Init()
	r.catchUp.Store(true) // the outage's end, as Run sees it
	for range 4 {
		r.Tick(context.Background(), true)
		moved := r.TestSignals.Ticked.WaitOrTimeout(t)
		require.LessOrEqual(t, moved["rewalk_rollups"], 4, "a tick pends at most its batch")
	}
	for _, root := range roots {
		require.Equal(t, "childrenSettled", rollupTask(t, db, root), "the catch-up pends the rollup the crash took")
	}
	require.Equal(t, 1, strings.Count(logs.String(), "crash restart of the database detected"), logs.String())
	require.Equal(t, 1, strings.Count(logs.String(), `"owners_walked":6,"rollups_pended":6`), logs.String())
}

// A second crash in the middle of the walk empties the walk's positions
// with the queue, the rollups already pended again among them: the walk
// starts over and every composite gets its rollup.
func TestReaper_RollsUpEveryCompositeWhenTheDatabaseCrashesAgainMidWalk(t *testing.T) {
	t.Parallel()
	c := newCrashable(t)
	roots, db := staleAfterACrash(t, c, 8)
	r := &Reaper{Maintenance: maintenance.New(db), Shards: allShards(), Log: zerolog.New(testlog.Writer(t)), Max: 2}
	r.Tick(context.Background(), true)
	require.Equal(t, 2, queued(t, db), "the first tick pended its batch of the walk")

	c.crash()
	db = c.pool()
	require.Zero(t, queued(t, db))
	r = &Reaper{Maintenance: maintenance.New(db), Shards: allShards(), Log: zerolog.New(testlog.Writer(t)), Max: 2}
	for range 6 {
		r.Tick(context.Background(), true)
	}
	for _, root := range roots {
		require.Equal(t, "childrenSettled", rollupTask(t, db, root), "the walk started over")
	}
}

// A composite still Reconciling owes its compose or its first rollup, and
// its lag says so (synced_gen < generation): the catch-up of lagging rows
// queues each again after a crash, as its own task type and trigger.
func TestReaper_RequeuesAfterACrashTheComposeAndFirstRollupOfReconcilingComposites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCrashable(t)
	db := c.pool()
	c.exec(db, `INSERT INTO kind_config (kind, version, has_composer, has_rollup) VALUES ('comp', 'v1', true, true), ('leaf', 'v1', false, false)`)
	var composing, rolling string
	require.NoError(t, db.QueryRow(ctx, `INSERT INTO resources (kind, version, name, shard_id)
	                                     VALUES ('comp', 'v1', 'composing', 3) RETURNING id::text`).Scan(&composing))
	require.NoError(t, db.QueryRow(ctx, `INSERT INTO resources (kind, version, name, composed_gen, shard_id)
	                                     VALUES ('comp', 'v1', 'rolling', 1, 4) RETURNING id::text`).Scan(&rolling))
	c.exec(db, `INSERT INTO resources (kind, version, name, synced_gen, owner_id, root_id, shard_id)
	            VALUES ('leaf', 'v1', 'settled', 1, $1, $1, 5)`, rolling)
	c.exec(db, `SELECT schedule_eligible(ARRAY[$1::uuid, $2::uuid])`, composing, rolling)
	require.Equal(t, "specChange", rollupTask(t, db, composing), "its compose is queued")
	require.Equal(t, "childrenSettled", rollupTask(t, db, rolling), "its first rollup is queued")

	c.crash()
	db = c.pool()
	require.Zero(t, queued(t, db))
	// The lagging rows' pass alone, with the window the tick after an
	// outage gives it (the rollup rewalk would pend the second one too).
	n, err := maintenance.New(db).RequeueFailedAndPending(ctx, shard.All, 100, 0)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, "specChange", rollupTask(t, db, composing), "the compose is queued again")
	require.Equal(t, "childrenSettled", rollupTask(t, db, rolling), "the first rollup is queued again")
}

// A synced resource whose resync failed retryably is Failed for its live
// spec (failure_gen = synced_gen = generation), retried only by its own
// queue row, backing off. A crash restart of Postgres empties the UNLOGGED
// queue: the drift resyncer passes the row by (not Ready or Degraded) and
// it does not lag its spec. The reaper's catch-up after the crash queues
// its resync again.
func TestReaper_RetriesAfterACrashTheResyncThatFailed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCrashable(t)
	db := c.pool()
	c.exec(db, `INSERT INTO kind_config (kind, version, resync_interval_secs) VALUES ('probe', 'v1', 60)`)
	var id string
	require.NoError(t, db.QueryRow(ctx, `INSERT INTO resources (kind, version, name, synced_gen, shard_id)
	                                     VALUES ('probe', 'v1', 'probed', 1, 9) RETURNING id::text`).Scan(&id))
	c.exec(db, `SELECT resync_resource($1)`, id)
	p := pipeline.New(db)
	tasks, err := p.Claim(ctx, pipeline.Lease{WorkerID: "worker", Lo: 0, Hi: 255},
		pipeline.Batch{Kind: "probe", Version: "v1", TaskType: pipeline.TaskReconcile, Max: 10})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, "resync", tasks[0].Trigger)
	require.NoError(t, p.AppendOutbox(ctx, tasks[0].Failure("the probe timed out", false)))
	_, err = p.DrainOutboxBatch(ctx, 10, 0, 255)
	require.NoError(t, err)
	require.Equal(t, "resync", rollupTask(t, db, id), "the failed resync backs off in the queue")

	c.crash()
	db = c.pool()
	require.Zero(t, queued(t, db), "the crash emptied the queue")
	var phase string
	require.NoError(t, db.QueryRow(ctx, `SELECT phase FROM resources WHERE id = $1`, id).Scan(&phase))
	require.Equal(t, "Failed", phase, "the failure is durable")

	r := &Reaper{Maintenance: maintenance.New(db), Shards: allShards(), Log: zerolog.New(testlog.Writer(t))}
	r.TestSignals.Init()
	r.catchUp.Store(true) // the outage's end, as Run sees it
	r.Tick(ctx, true)
	r.TestSignals.Ticked.WaitOrTimeout(t)
	require.Equal(t, "resync", rollupTask(t, db, id), "the catch-up queues the failed resync again")
}

// An operation (an operator's verb) is finished by its task's first
// result: a failure, retryable or not, makes it Failed with the worker's
// error at once and removes its task, so a failed operation has no task to
// lose. A crash restart of Postgres takes the tasks of the open ones: the
// reaper's catch-up queues a Pending one's task again (it never ran) and
// fails a Running one, saying so (its verb may have run). None is left open
// without a task, and none is run twice.
func TestReaper_LeavesNoOperationOpenWithoutItsTaskAfterACrash(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newCrashable(t)
	db := c.pool()
	c.exec(db, `INSERT INTO kind_config (kind, version) VALUES ('leaf', 'v1')`)
	operation := func(name string) string {
		var op string
		require.NoError(t, db.QueryRow(ctx, `
WITH r AS (INSERT INTO resources (kind, version, name, synced_gen, shard_id) VALUES ('leaf', 'v1', $1, 1, 11)
           RETURNING id, shard_id, kind, version, generation),
     o AS (INSERT INTO resource_operations (resource_id, verb) SELECT id, 'flip' FROM r RETURNING id, resource_id),
     q AS (INSERT INTO work_queue (resource_id, task_type, op_id, shard_id, kind, version, generation, trigger)
           SELECT r.id, 'operate', o.id, r.shard_id, r.kind, r.version, r.generation, 'operation' FROM r, o)
SELECT id::text FROM o`, name).Scan(&op))
		return op
	}
	claim := func() pipeline.Task {
		tasks, err := pipeline.New(db).Claim(ctx, pipeline.Lease{WorkerID: "worker", Lo: 0, Hi: 255},
			pipeline.Batch{Kind: "leaf", Version: "v1", TaskType: pipeline.TaskOperate, Max: 10})
		require.NoError(t, err)
		require.Len(t, tasks, 1)
		return tasks[0]
	}
	state := func(op string) (string, string) {
		var s, msg string
		require.NoError(t, db.QueryRow(ctx, `SELECT state, coalesce(error, '') FROM resource_operations WHERE id = $1`, op).
			Scan(&s, &msg))
		return s, msg
	}
	opTasks := func(op string) int {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM work_queue WHERE op_id = $1`, op).Scan(&n))
		return n
	}

	failed := operation("failed")
	p := pipeline.New(db)
	require.NoError(t, p.AppendOutbox(ctx, claim().Failure("device busy", false)))
	_, err := p.DrainOutboxBatch(ctx, 10, 0, 255)
	require.NoError(t, err)
	s, msg := state(failed)
	require.Equal(t, "Failed", s, "a retryable failure finishes the operation")
	require.Equal(t, "device busy", msg)
	require.Zero(t, opTasks(failed), "a failed operation keeps no task")
	running := operation("running")
	claim()
	s, _ = state(running)
	require.Equal(t, "Running", s)
	pending := operation("pending")

	c.crash()
	db = c.pool()
	require.Zero(t, queued(t, db), "the crash emptied the queue")
	r := &Reaper{Maintenance: maintenance.New(db), Shards: allShards(), Log: zerolog.New(testlog.Writer(t))}
	r.TestSignals.Init()
	r.catchUp.Store(true) // the outage's end, as Run sees it
	r.Tick(ctx, true)
	r.TestSignals.Ticked.WaitOrTimeout(t)

	s, _ = state(pending)
	require.Equal(t, "Pending", s)
	require.Equal(t, 1, opTasks(pending), "a Pending operation's task is queued again")
	s, msg = state(running)
	require.Equal(t, "Failed", s, "a Running operation whose task is gone may have run: failed, not run again")
	require.Contains(t, msg, "lost")
	require.Zero(t, opTasks(running))
	s, msg = state(failed)
	require.Equal(t, "Failed", s)
	require.Equal(t, "device busy", msg, "a failed operation is left as it ended")
	require.Zero(t, opTasks(failed))
	require.Equal(t, 1, queued(t, db), "nothing else was queued")
}
