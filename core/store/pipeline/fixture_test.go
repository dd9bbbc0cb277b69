package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// fx is one test's fresh database plus helpers to lay out kinds, resources
// and edges and to read back what the pipeline wrote.
type fx struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
	st   *Store
}

func newFx(t *testing.T) *fx {
	t.Helper()
	pool := pgtest.Pool(t)
	return &fx{t: t, ctx: context.Background(), pool: pool, st: New(pool)}
}

// Reaction sets of the test kinds.
const (
	reactWorker    = `[{"name":"work","trigger":"specChange","emits":["status"]}]`
	reactComposite = `[{"name":"compose","trigger":"specChange","emits":["children","edges","configs","status"]},
	                   {"name":"rollup","trigger":"childrenSettled","emits":["status"]}]`
	reactComposer  = `[{"name":"compose","trigger":"specChange","emits":["children","status"]}]`
	reactFinalizer = `[{"name":"work","trigger":"specChange","emits":["status"]},
	                   {"name":"teardown","trigger":"deleteRequested","emits":["finalizer"],"finalizer":"test/teardown"}]`
	reactOperate = `[{"name":"work","trigger":"specChange","emits":["status"]},
	                 {"name":"flip","trigger":"operation","emits":["operationOutput"],"verb":"flip"}]`
)

// kind applies a manifest for kind with the given reactions and extra
// top-level fields (`"max_inflight": 5`).
func (f *fx) kind(kind, reactions string, extra ...string) {
	f.t.Helper()
	doc := fmt.Sprintf(`{"kind":%q,"reactions":%s`, kind, reactions)
	for _, e := range extra {
		doc += "," + e
	}
	doc += "}"
	f.exec(`INSERT INTO kind_manifest (kind, version, manifest) VALUES ($1, 'v1', $2)`, kind, doc)
}

// resOpt tweaks a resource before insert.
type resOpt func(*resRow)

type resRow struct {
	id        uuid.UUID
	owner     *uuid.UUID
	spec      string
	labels    string
	configRef *string
}

func withID(id uuid.UUID) resOpt   { return func(r *resRow) { r.id = id } }
func owner(id uuid.UUID) resOpt    { return func(r *resRow) { r.owner = &id } }
func spec(s string) resOpt         { return func(r *resRow) { r.spec = s } }
func labels(s string) resOpt       { return func(r *resRow) { r.labels = s } }
func configRef(name string) resOpt { return func(r *resRow) { r.configRef = &name } }

// res inserts a resource (generation 1, never synced) and returns its id.
func (f *fx) res(kind, name string, opts ...resOpt) uuid.UUID {
	f.t.Helper()
	r := resRow{id: uuid.New(), spec: `{}`, labels: `{}`}
	for _, o := range opts {
		o(&r)
	}
	id := r.id
	f.exec(`INSERT INTO resources (id, kind, version, name, spec, labels, owner_id, root_id, shard_id, provider_config_ref)
	        VALUES ($1, $2, 'v1', $3, $4, $5, $6,
	                (SELECT coalesce(o.root_id, o.id) FROM resources o WHERE o.id = $6), shard_of($1), $7)`,
		id, kind, name, r.spec, r.labels, r.owner, r.configRef)
	return id
}

// edge makes dependent wait on dependency, with optional value flows JSON.
func (f *fx) edge(dependent, dependency uuid.UUID, flows ...string) {
	f.t.Helper()
	fl := `[]`
	if len(flows) > 0 {
		fl = flows[0]
	}
	f.exec(`INSERT INTO resource_deps (dependent_id, dependency_id, value_flows) VALUES ($1, $2, $3)`, dependent, dependency, fl)
}

// set runs UPDATE resources SET <assign> WHERE id = id.
func (f *fx) set(id uuid.UUID, assign string, args ...any) {
	f.t.Helper()
	f.exec(fmt.Sprintf(`UPDATE resources SET %s WHERE id = $1`, assign), append([]any{id}, args...)...)
}

// synced marks a resource reconciled at its generation.
func (f *fx) synced(ids ...uuid.UUID) {
	f.t.Helper()
	for _, id := range ids {
		f.set(id, `synced_gen = generation, composed_gen = generation`)
	}
}

func (f *fx) exec(sql string, args ...any) {
	f.t.Helper()
	_, err := f.pool.Exec(f.ctx, sql, args...)
	require.NoError(f.t, err, sql)
}

// scalar reads one value.
func scalar[T any](f *fx, sql string, args ...any) T {
	f.t.Helper()
	var v T
	require.NoError(f.t, f.pool.QueryRow(f.ctx, sql, args...).Scan(&v), sql)
	return v
}

// schedule runs schedule_eligible at the database clock.
func (f *fx) schedule(ids ...uuid.UUID) int {
	f.t.Helper()
	n, err := f.st.ScheduleEligible(f.ctx, ids)
	require.NoError(f.t, err)
	return n
}

// queued is the reconcile row of id: its generation and trigger; ok false
// when there is none.
type queuedRow struct {
	Generation int64
	Trigger    string
	Attempts   int
	Leased     bool
	NotBefore  time.Time
	Config     json.RawMessage
	Bundle     json.RawMessage
}

func (f *fx) queued(id uuid.UUID, tt TaskType) (queuedRow, bool) {
	f.t.Helper()
	var q queuedRow
	err := f.pool.QueryRow(f.ctx, `SELECT generation, trigger, attempts, worker_id IS NOT NULL, not_before, provider_config, provider_bundle
	                                 FROM work_queue WHERE resource_id = $1 AND task_type = $2`, id, string(tt)).
		Scan(&q.Generation, &q.Trigger, &q.Attempts, &q.Leased, &q.NotBefore, &q.Config, &q.Bundle)
	if errors.Is(err, pgx.ErrNoRows) {
		return queuedRow{}, false
	}
	require.NoError(f.t, err)
	return q, true
}

// isQueued reports whether id has a reconcile row.
func (f *fx) isQueued(id uuid.UUID) bool {
	f.t.Helper()
	_, ok := f.queued(id, TaskReconcile)
	return ok
}

// phase reads the stored phase.
func (f *fx) phase(id uuid.UUID) string {
	f.t.Helper()
	return scalar[string](f, `SELECT phase FROM resources WHERE id = $1`, id)
}

// noCascade disables cascade_on_ready_change in this test's database, so a
// gate test sees only what its own schedule call does.
func (f *fx) noCascade() {
	f.t.Helper()
	f.exec(`ALTER TABLE resources DISABLE TRIGGER cascade_on_ready_change`)
}

// all is a lease over every shard.
var all = Lease{WorkerID: "w-all", Lo: 0, Hi: 255}

// claim leases up to limit reconcile tasks of kind over every shard.
func (f *fx) claim(kind string, limit int) []Task {
	f.t.Helper()
	ts, err := f.st.Claim(f.ctx, all, Batch{Kind: kind, Version: "v1", TaskType: TaskReconcile, Max: limit})
	require.NoError(f.t, err)
	return ts
}

// claimOne claims kind's single pending reconcile task.
func (f *fx) claimOne(kind string) Task {
	f.t.Helper()
	ts := f.claim(kind, 1)
	require.Len(f.t, ts, 1, "one %s task pending", kind)
	return ts[0]
}

// claimOneAs claims kind's single pending reconcile task for claimer (a
// cluster member id) over every shard.
func (f *fx) claimOneAs(claimer, kind string) Task {
	f.t.Helper()
	ts, err := f.st.Claim(f.ctx, Lease{WorkerID: claimer, Lo: 0, Hi: 255}, Batch{Kind: kind, Version: "v1", TaskType: TaskReconcile, Max: 1})
	require.NoError(f.t, err)
	require.Len(f.t, ts, 1, "one %s task pending", kind)
	return ts[0]
}

// finish appends results and drains the outbox dry.
func (f *fx) finish(results ...Result) {
	f.t.Helper()
	require.NoError(f.t, f.st.AppendOutbox(f.ctx, results...))
	f.drain()
}

// drain drains every shard until the outbox is empty.
func (f *fx) drain() {
	f.t.Helper()
	for {
		n, err := f.st.DrainOutboxBatch(f.ctx, 1000, 0, 255)
		require.NoError(f.t, err)
		if n == 0 {
			return
		}
	}
}

// runLeaves claims every pending task of kind and finishes each with
// status(task), until none is pending; it returns how many it ran.
func (f *fx) runLeaves(kind string, status func(Task) string) int {
	f.t.Helper()
	ran := 0
	for {
		ts := f.claim(kind, 100)
		if len(ts) == 0 {
			return ran
		}
		var rs []Result
		for _, t := range ts {
			rs = append(rs, t.Result(json.RawMessage(status(t))))
		}
		f.finish(rs...)
		ran += len(ts)
	}
}

// idInShards returns a fresh id whose shard_of falls in [lo, hi].
func (f *fx) idInShards(lo, hi int) uuid.UUID {
	f.t.Helper()
	for {
		id := uuid.New()
		if s := scalar[int](f, `SELECT shard_of($1)`, id); s >= lo && s <= hi {
			return id
		}
	}
}

// explainedConn is a connection to f's database on which auto_explain
// logs every plan, nested statements' too, into the returned slice.
func explainedConn(f *fx) (*pgx.Conn, *[]string) {
	f.t.Helper()
	cfg, err := pgx.ParseConfig(f.pool.Config().ConnConfig.ConnString())
	require.NoError(f.t, err)
	plans := &[]string{}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { *plans = append(*plans, n.Message) }
	conn, err := pgx.ConnectConfig(f.ctx, cfg)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = conn.Close(context.Background()) })
	for _, s := range []string{`LOAD 'auto_explain'`, `SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`, `SET auto_explain.log_level = 'notice'`} {
		_, err := conn.Exec(f.ctx, s)
		require.NoError(f.t, err, s)
	}
	return conn, plans
}
