package maintenance_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/maintenance"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// t0 is the fixed "now" the tests drive every pass with.
var t0 = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

var ctx = context.Background()

type fixture struct {
	t  *testing.T
	db *pgxpool.Pool
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	return &fixture{t: t, db: pgtest.Pool(t)}
}

// at is a maintenance store whose clock reads now.
func (f *fixture) at(now time.Time) *maintenance.Store {
	return maintenance.New(f.db).WithClock(func() time.Time { return now })
}

func (f *fixture) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.db.Exec(ctx, sql, args...)
	require.NoError(f.t, err, sql)
}

func (f *fixture) int(sql string, args ...any) int {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.db.QueryRow(ctx, sql, args...).Scan(&n), sql)
	return n
}

func (f *fixture) bool(sql string, args ...any) bool {
	f.t.Helper()
	var b bool
	require.NoError(f.t, f.db.QueryRow(ctx, sql, args...).Scan(&b), sql)
	return b
}

// kind is a kind_config row.
type kind struct {
	name         string
	maxInflight  int
	resyncSecs   int
	recomposes   bool
	finalizer    string // "" = none
	hasComposer  bool
	hasRollup    bool
	orphanGraceS int
}

func (f *fixture) kind(k kind) {
	f.t.Helper()
	var fin any
	if k.finalizer != "" {
		fin = k.finalizer
	}
	f.exec(`INSERT INTO kind_config (kind, version, max_inflight, resync_interval_secs, resync_recomposes,
	                                 finalizer_name, has_composer, has_rollup, orphan_grace_secs)
	        VALUES ($1, 'v1', $2, $3, $4, $5, $6, $7, $8)`,
		k.name, k.maxInflight, k.resyncSecs, k.recomposes, fin, k.hasComposer, k.hasRollup, k.orphanGraceS)
}

// res describes a resource row. Zero values give a settled (Ready) row of
// kind "leaf" at generation 1 in shard 0, updated a day before t0.
type res struct {
	kind        string
	name        string
	shard       int
	gen         int  // default 1
	lagging     bool // synced_gen = gen-1 (else = gen)
	failed      bool // failure_gen = gen (implies lagging)
	failureGen  int  // an explicit older failure_gen
	terminal    bool
	composedGen int
	healthBad   bool
	frozen      *time.Time // finite = orphaned, infinity via quarantined
	quarantined bool
	deleting    bool
	finalizers  []string
	owner, root string
	updatedAt   time.Time
}

func ptr[T any](v T) *T { return &v }

func (f *fixture) res(r res) string {
	f.t.Helper()
	if r.kind == "" {
		r.kind = "leaf"
	}
	var name any
	if r.name != "" {
		name = r.name
	}
	if r.gen == 0 {
		r.gen = 1
	}
	synced := r.gen
	if r.lagging || r.failed {
		synced = r.gen - 1
	}
	if r.failed {
		r.failureGen = r.gen
	}
	if r.updatedAt.IsZero() {
		r.updatedAt = t0.Add(-24 * time.Hour)
	}
	var frozen any
	switch {
	case r.quarantined:
		frozen = "infinity"
	case r.frozen != nil:
		frozen = *r.frozen
	}
	var deleting any
	if r.deleting {
		deleting = t0.Add(-time.Hour)
	}
	if r.finalizers == nil {
		r.finalizers = []string{}
	}
	var owner, root any
	if r.owner != "" {
		owner = r.owner
	}
	if r.root != "" {
		root = r.root
	}
	var id string
	require.NoError(f.t, f.db.QueryRow(ctx, `
INSERT INTO resources (kind, version, name, generation, synced_gen, composed_gen, failure_gen, failure_terminal,
                       health_ok, frozen_until, deletion_requested_at, finalizers, owner_id, root_id, shard_id,
                       created_at, updated_at)
VALUES ($1, 'v1', coalesce($2::text, 'r-' || substr(md5(random()::text), 1, 12)), $3, $4, $5, $6, $7, $8, $9::timestamptz, $10, $11, $12, $13, $14, $15, $15)
RETURNING id::text`,
		r.kind, name, r.gen, synced, r.composedGen, r.failureGen, r.terminal, !r.healthBad, frozen, deleting,
		r.finalizers, owner, root, r.shard, r.updatedAt).Scan(&id))
	return id
}

// dep makes dependent depend on dependency.
func (f *fixture) dep(dependent, dependency string) {
	f.t.Helper()
	f.exec(`INSERT INTO resource_deps (dependent_id, dependency_id) VALUES ($1, $2)`, dependent, dependency)
}

// task is a work_queue row as the tests look at it.
type task struct {
	taskType string
	trigger  string
	gen      int
	leased   bool
}

// task inserts a work_queue row for resource id.
func (f *fixture) task(id, taskType string, worker string, heartbeat, notBefore time.Time) {
	f.t.Helper()
	var w, hb any
	if worker != "" {
		w, hb = worker, heartbeat
	}
	f.exec(`INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, worker_id,
	                                claim_epoch, leased_at, heartbeat_at, not_before, created_at)
	        SELECT id, $2, shard_id, kind, version, generation, $3,
	               CASE WHEN $3::text IS NULL THEN NULL ELSE nextval('claim_epoch_seq') END, $4, $4, $5, $5
	          FROM resources WHERE id = $1`, id, taskType, w, hb, notBefore)
}

// tasks lists the work_queue rows of resource id.
func (f *fixture) tasks(id string) []task {
	f.t.Helper()
	rows, err := f.db.Query(ctx, `SELECT task_type, trigger, generation, worker_id IS NOT NULL
	                                FROM work_queue WHERE resource_id = $1 ORDER BY task_type`, id)
	require.NoError(f.t, err)
	defer rows.Close()
	var out []task
	for rows.Next() {
		var k task
		require.NoError(f.t, rows.Scan(&k.taskType, &k.trigger, &k.gen, &k.leased))
		out = append(out, k)
	}
	require.NoError(f.t, rows.Err())
	return out
}

func (f *fixture) exists(id string) bool {
	f.t.Helper()
	return f.bool(`SELECT EXISTS (SELECT 1 FROM resources WHERE id = $1)`, id)
}

func (f *fixture) phase(id string) string {
	f.t.Helper()
	var p string
	require.NoError(f.t, f.db.QueryRow(ctx, `SELECT phase FROM resources WHERE id = $1`, id).Scan(&p))
	return p
}

func contextWithTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

// needs skips the test until every named SQL function exists: these tests
// drive H3's claim and drain (00002_scheduling.sql), which land separately.
func (f *fixture) needs(fns ...string) {
	f.t.Helper()
	for _, fn := range fns {
		if !f.bool(`SELECT EXISTS (SELECT 1 FROM pg_proc WHERE proname = $1)`, fn) {
			f.t.Skipf("%s is not in the migrations yet", fn)
		}
	}
}

// pipe is H3's pipeline store on the fixture's database, at clock now.
func (f *fixture) pipe(now time.Time) *pipeline.Store {
	p := pipeline.New(f.db)
	p.Clock = func() time.Time { return now }
	return p
}

// work plays a fleet of workers for one round: claim every pending task of
// the given kinds and task type across all shards, succeed each (status for
// a reconcile, the finalizer stripped for a delete), append and drain.
// It returns the ids worked.
func (f *fixture) work(now time.Time, tt pipeline.TaskType, status string, kinds ...string) []string {
	f.t.Helper()
	p := f.pipe(now)
	var results []pipeline.Result
	var ids []string
	for _, k := range kinds {
		tasks, err := p.Claim(ctx, pipeline.Lease{WorkerID: "worker", Lo: 0, Hi: 255},
			pipeline.Batch{Kind: k, Version: "v1", TaskType: tt, Max: 1000})
		require.NoError(f.t, err)
		for _, task := range tasks {
			results = append(results, task.Result(json.RawMessage(status)))
			ids = append(ids, task.Key.ResourceID.String())
		}
	}
	require.NoError(f.t, p.AppendOutbox(ctx, results...))
	for {
		n, err := p.DrainOutboxBatch(ctx, 1000, 0, 255)
		require.NoError(f.t, err)
		if n == 0 {
			break
		}
	}
	return ids
}
