package maintenance_test

import (
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shard"
)

// planConn is a connection that reports, through auto_explain at NOTICE
// level, the plan of every statement the reaper's functions run inside.
func (f *fixture) planConn() (*pgx.Conn, func() []string) {
	f.t.Helper()
	var mu sync.Mutex
	var plans []string
	cfg := f.db.Config().ConnConfig.Copy()
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		plans = append(plans, n.Message)
		mu.Unlock()
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { _ = conn.Close(ctx) })
	for _, s := range []string{
		`LOAD 'auto_explain'`,
		`SET auto_explain.log_min_duration = 0`,
		`SET auto_explain.log_nested_statements = on`,
		`SET auto_explain.log_level = 'notice'`,
		`SET client_min_messages = notice`,
	} {
		_, err := conn.Exec(ctx, s)
		require.NoError(f.t, err, s)
	}
	return conn, func() []string {
		mu.Lock()
		defer mu.Unlock()
		out := plans
		plans = nil
		return out
	}
}

var partitionRE = regexp.MustCompile(`\b(work_queue|lifecycle_outbox)_p(\d+)\b`)

// partitionsTouched lists the queue partitions the plans read.
func partitionsTouched(plans []string) []string {
	seen := map[string]bool{}
	for _, p := range plans {
		for _, m := range partitionRE.FindAllString(p, -1) {
			seen[m] = true
		}
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// A reaper pass over a range narrower than a partition (shards 3-5, inside
// p0 = 0..15) reads exactly one partition of the queue tables, also once
// plpgsql switches to its generic plan (run-time pruning).
func TestReaperPasses_NarrowRangeTouchesOnePartition(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "vpc", maxInflight: 5})
	f.kind(kind{name: "net", finalizer: "net.example/teardown"})
	// Rows in the range, so every gate opens and every statement runs.
	lagging := f.res(res{kind: "vpc", shard: 4, gen: 2, lagging: true, updatedAt: t0.Add(-time.Hour)})
	leased := f.res(res{kind: "vpc", shard: 5, gen: 2, lagging: true})
	f.task(leased, "reconcile", "w", t0.Add(-time.Hour), t0.Add(-48*time.Hour))
	f.res(res{kind: "net", shard: 3, deleting: true, finalizers: []string{"net.example/teardown"}})
	f.exec(`INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor,
	                                      watch_kind, snapshot, worker_id, heartbeat_at)
	        VALUES ($1, 'synced', 1, 'b', 4, 'sink', 'vpc', '{}', 'd', $2)`, lagging, t0.Add(-time.Hour))

	conn, plans := f.planConn()
	r := shard.Between(3, 5)
	passes := map[string]struct {
		sql  string
		want string
	}{
		"reap_stale_work":            {`SELECT reap_stale_work(3, 5, interval '1 minute', $1)`, "work_queue_p0"},
		"delete_unclaimed_work":      {`SELECT delete_unclaimed_work(3, 5, interval '1 hour', $1)`, "work_queue_p0"},
		"requeue_failed_and_pending": {`SELECT requeue_failed_and_pending(3, 5, 10, interval '1 minute', $1)`, "work_queue_p0"},
		"sweep_deletable":            {`SELECT sweep_deletable(3, 5, 10, $1)`, "work_queue_p0"},
		"recount_inflight":           {`SELECT recount_inflight(3, 5) WHERE $1::timestamptz IS NOT NULL`, "work_queue_p0"},
		"reap_stale_lifecycle":       {`SELECT reap_stale_lifecycle(3, 5, interval '1 minute', $1)`, "lifecycle_outbox_p0"},
	}
	for name, p := range passes {
		for i := range 7 { // past plpgsql's five custom plans
			_, err := conn.Exec(ctx, p.sql, t0)
			require.NoError(t, err, name)
			got := partitionsTouched(plans())
			if i == 0 || i == 6 {
				require.Equal(t, []string{p.want}, got, "%s (call %d) over shards %s reads one partition", name, i+1, r)
			}
		}
	}
	// The claim-side counterpart: a plain BETWEEN probe, for the record.
	var plan strings.Builder
	rows, err := f.db.Query(ctx, `EXPLAIN SELECT 1 FROM work_queue WHERE shard_id BETWEEN 3 AND 5 AND worker_id IS NOT NULL`)
	require.NoError(t, err)
	for rows.Next() {
		var line string
		require.NoError(t, rows.Scan(&line))
		plan.WriteString(line + "\n")
	}
	require.Equal(t, []string{"work_queue_p0"}, partitionsTouched([]string{plan.String()}))
}

// On an idle fleet each pass's first probe is an index probe of a partial
// index that is empty in steady state. (Sequential scans are disabled so the
// tiny test tables show which index the probe CAN use, as at scale.)
func TestReaperPasses_IdleGatesProbeEmptyPartialIndexes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.kind(kind{name: "leaf"})
	for s := range 20 {
		f.res(res{shard: s}) // a healthy, settled fleet
	}
	conn, plans := f.planConn()
	_, err := conn.Exec(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	gates := map[string]struct{ sql, index string }{
		"sweep_deletable":            {`SELECT sweep_deletable(0, 15, 100, $1)`, "idx_resource_phases_deleting"},
		"sweep_expired_orphans":      {`SELECT sweep_expired_orphans(0, 15, 100, $1)`, "idx_resources_frozen_sweep"},
		"requeue_failed_and_pending": {`SELECT requeue_failed_and_pending(0, 15, 100, interval '1 minute', $1)`, "idx_resource_phases_lagging"},
	}
	for name, g := range gates {
		var n int
		require.NoError(t, conn.QueryRow(ctx, g.sql, t0).Scan(&n), name)
		require.Zero(t, n, name)
		all := strings.Join(plans(), "\n")
		require.Contains(t, all, g.index, "%s's idle gate", name)
		require.NotContains(t, all, "Seq Scan on resources", name)
	}
}
