package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/db/pgpool"
	"github.com/converge-run/converge/db/pgtest"
)

// Benchmark shape. BENCH_N leaves under composite roots of benchLeaves
// children each: half nets, half apps, every app depending on its net with a
// value flow (/net_id), so the run exercises compose, the upstream gate, the
// substitute pass, the rollup gate and the cascade.
const (
	benchLeaves     = 1000 // leaves per root
	benchClaimers   = 4    // claimer goroutines, disjoint shard ranges
	benchDrainers   = 4    // drainer goroutines, disjoint shard ranges
	benchClaimBatch = 500
	benchDrainBatch = 1000
	benchComposers  = 2 // concurrent root tasks per claimer
)

// BenchmarkSched drives BENCH_N leaf resources (default 100000) through
// compose → schedule → claim → outbox append → drain entirely from Go, with
// instant results and production-like batching, until every root is Ready,
// and prints one bench-sched line. Run it alone:
//
//	go test ./core/store/pipeline -run '^$' -bench '^BenchmarkSched$' -benchtime 1x -timeout 60m
//
// It starts its own private Postgres with default durability (fsync and
// synchronous_commit on) and shared_buffers=1GB.
func BenchmarkSched(b *testing.B) {
	n := 100000
	if v := os.Getenv("BENCH_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < benchLeaves {
			b.Fatalf("BENCH_N=%q: want an integer >= %d", v, benchLeaves)
		}
	}
	roots := n / benchLeaves
	n = roots * benchLeaves
	ctx := context.Background()
	pool := benchPool(b, ctx)
	st := New(pool)
	mustExec(b, pool, `
INSERT INTO kind_manifest (kind, version, manifest) VALUES
 ('broot', 'v1', '{"kind":"broot","reactions":[{"name":"compose","trigger":"specChange","emits":["children","edges","status"]},
                                              {"name":"rollup","trigger":"childrenSettled","emits":["status"]}]}'),
 ('bnet',  'v1', '{"kind":"bnet","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}'),
 ('bapp',  'v1', '{"kind":"bapp","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}')`)

	for b.Loop() {
		start := time.Now()
		mustExec(b, pool, `
WITH ins AS (
    INSERT INTO resources (id, kind, version, name, spec, shard_id)
    SELECT id, 'broot', 'v1', 'root-' || i, jsonb_build_object('pairs', $2::int), shard_of(id)
      FROM (SELECT gen_random_uuid() AS id, i FROM generate_series(1, $1) i) x
    RETURNING id
)
SELECT schedule_eligible(array_agg(id)) FROM ins`, roots, benchLeaves/2)

		var claimed, composed atomic.Int64
		runCtx, stop := context.WithCancel(ctx)
		var wg sync.WaitGroup
		errs := make(chan error, benchClaimers+benchDrainers)
		for i := range benchClaimers {
			lo, hi := i*256/benchClaimers, (i+1)*256/benchClaimers-1
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := benchWorker(runCtx, st, Lease{WorkerID: fmt.Sprintf("bench-%d", i), Lo: lo, Hi: hi}, &claimed, &composed); err != nil {
					errs <- err
				}
			}()
		}
		for i := range benchDrainers {
			lo, hi := i*256/benchDrainers, (i+1)*256/benchDrainers-1
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := benchDrainer(runCtx, st, lo, hi); err != nil {
					errs <- err
				}
			}()
		}
		var ready int
		lastReport := time.Now()
		for ready < roots {
			select {
			case err := <-errs:
				stop()
				b.Fatal(err)
			case <-time.After(100 * time.Millisecond):
			}
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM resources WHERE kind = 'broot' AND phase = 'Ready'`).Scan(&ready); err != nil {
				b.Fatal(err)
			}
			if os.Getenv("BENCH_PROFILE") != "" && time.Since(lastReport) > 10*time.Second {
				lastReport = time.Now()
				var phases string
				_ = pool.QueryRow(ctx, `SELECT string_agg(kind || '/' || phase || '=' || n, ' ' ORDER BY kind, phase) FROM (
				    SELECT kind, phase, count(*) n FROM resources GROUP BY 1, 2) x`).Scan(&phases)
				var queued, leased, outbox int
				_ = pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE worker_id IS NULL), count(*) FILTER (WHERE worker_id IS NOT NULL),
				    (SELECT count(*) FROM work_outbox) FROM work_queue`).Scan(&queued, &leased, &outbox)
				fmt.Printf("  t=%5.1fs ready_roots=%d queued=%d leased=%d outbox=%d claimed=%d %s\n",
					time.Since(start).Seconds(), ready, queued, leased, outbox, claimed.Load(), phases)
			}
		}
		elapsed := time.Since(start)
		stop()
		wg.Wait()
		total := n + roots
		b.ReportMetric(float64(total)/elapsed.Seconds(), "resources/s")
		hotPct := resourcesHotPct(ctx, pool)
		fmt.Printf("bench-sched: n=%d resources_per_sec=%.0f drain_batch=%d claim_batch=%d elapsed_s=%.1f roots=%d leaves_per_root=%d claimers=%d drainers=%d tasks=%d composes=%d drain_deadlocks=%d resources_hot_pct=%.1f\n",
			n, float64(total)/elapsed.Seconds(), benchDrainBatch, benchClaimBatch, elapsed.Seconds(), roots, benchLeaves,
			benchClaimers, benchDrainers, claimed.Load(), composed.Load(), deadlocks.Load(), hotPct)
		if os.Getenv("BENCH_PROFILE") != "" {
			printTimes()
		}
		if os.Getenv("BENCH_STATEMENTS") != "" {
			printStatements(ctx, pool)
		}
	}
}

// deadlocks counts drain batches the deadlock detector rolled back.
var deadlocks atomic.Int64

// benchTimes accumulates wall time per call type (BENCH_PROFILE=1 prints it).
var benchTimes sync.Map

type benchTime struct{ total, calls atomic.Int64 }

func timed(name string, start time.Time) {
	d := time.Since(start)
	v, _ := benchTimes.LoadOrStore(name, new(benchTime))
	v.(*benchTime).total.Add(int64(d))
	v.(*benchTime).calls.Add(1)
}

func printTimes() {
	benchTimes.Range(func(k, v any) bool {
		bt := v.(*benchTime)
		tot := time.Duration(bt.total.Load())
		fmt.Printf("  %-12s %8.2fs %7d calls %8.2fms/call\n", k, tot.Seconds(), bt.calls.Load(),
			float64(tot.Microseconds())/1000/float64(max(bt.calls.Load(), 1)))
		return true
	})
}

// benchWorker is a claimer plus instant handlers: it claims each kind's
// pending reconcile tasks in batches and appends every batch's results in
// one outbox insert. Roots run on their own goroutines (at most
// benchComposers at a time per claimer), as a broker runs tasks
// concurrently: a compose of 1000 children must not stall the leaf claims.
func benchWorker(ctx context.Context, st *Store, l Lease, claimed, composed *atomic.Int64) error {
	idleWait := time.Millisecond
	kinds := []string{"broot", "bnet", "bapp"}
	// A kind that came back empty is skipped for a while, as a dispatcher
	// woken by work_ready would not re-sweep it either.
	skipUntil := make([]time.Time, len(kinds))
	sem := make(chan struct{}, benchComposers)
	var roots sync.WaitGroup
	defer roots.Wait()
	rootErr := make(chan error, 1)
	for ctx.Err() == nil {
		select {
		case err := <-rootErr:
			return err
		default:
		}
		idle := true
		for ki, kind := range kinds {
			if time.Now().Before(skipUntil[ki]) {
				continue
			}
			limit := benchClaimBatch
			if kind == "broot" {
				limit = cap(sem) - len(sem)
				if limit == 0 {
					continue
				}
			}
			t0 := time.Now()
			ts, err := st.Claim(ctx, l, Batch{Kind: kind, Version: "v1", TaskType: TaskReconcile, Max: limit})
			if len(ts) > 0 {
				timed("claim-"+kind, t0)
			} else {
				timed("claim-empty", t0)
			}
			if err != nil {
				return ignoreCancel(err)
			}
			if len(ts) == 0 {
				skipUntil[ki] = time.Now().Add(50 * time.Millisecond)
				continue
			}
			idle = false
			claimed.Add(int64(len(ts)))
			if kind == "broot" {
				for _, t := range ts {
					sem <- struct{}{}
					roots.Add(1)
					go func() {
						defer roots.Done()
						defer func() { <-sem }()
						if t.Resource.ComposedGen < t.Generation {
							composed.Add(1)
						}
						r, err := benchRoot(ctx, st, t)
						if err == nil {
							err = st.AppendOutbox(ctx, r)
						}
						if err = ignoreCancel(err); err != nil {
							select {
							case rootErr <- err:
							default:
							}
						}
					}()
				}
				continue
			}
			results := make([]Result, 0, len(ts))
			for _, t := range ts {
				if kind == "bnet" {
					results = append(results, t.Result(json.RawMessage(`{"net_id":"`+t.Resource.Name+`"}`)))
				} else {
					results = append(results, t.Result(json.RawMessage(`{"ok":true}`)))
				}
			}
			t0 = time.Now()
			if err := st.AppendOutbox(ctx, results...); err != nil {
				return ignoreCancel(err)
			}
			timed("append", t0)
		}
		if !idle {
			idleWait = time.Millisecond
			continue
		}
		// A dispatcher would LISTEN on work_ready; polling with a short
		// backoff is close enough here.
		select {
		case <-ctx.Done():
		case <-time.After(idleWait):
		}
		idleWait = min(2*idleWait, 20*time.Millisecond)
	}
	return nil
}

// benchRoot composes a root on its first run (and defers the rollup) and
// rolls it up once the gate let it run again.
func benchRoot(ctx context.Context, st *Store, t Task) (Result, error) {
	if t.Resource.ComposedGen >= t.Generation {
		return t.Result(json.RawMessage(`{"rolled_up":true}`)), nil
	}
	var spec struct{ Pairs int }
	if err := json.Unmarshal(t.Resource.Spec, &spec); err != nil {
		return Result{}, err
	}
	c := Composition{}
	for i := range spec.Pairs {
		net, app := fmt.Sprintf("%s-net-%d", t.Resource.Name, i), fmt.Sprintf("%s-app-%d", t.Resource.Name, i)
		c.Children = append(c.Children,
			Child{Kind: "bnet", Name: net, Spec: json.RawMessage(`{"cidr":"10.0.0.0/24"}`)},
			Child{Kind: "bapp", Name: app, Spec: json.RawMessage(`{"image":"app"}`)})
		c.Edges = append(c.Edges, Edge{Dependent: app, Dependency: Ref{Child: net},
			ValueFlows: []ValueFlow{{SrcField: "/net_id", DepField: "/net_id"}}})
	}
	defer timed("compose", time.Now())
	if _, err := st.ApplyCompose(ctx, t, c); err != nil {
		return Result{}, err
	}
	r := t.Result(json.RawMessage(`{"composed":true}`))
	r.DeferSync = true
	return r, nil
}

// benchDrainer drains its shard range until empty, closes straddles, and
// polls briefly when idle.
func benchDrainer(ctx context.Context, st *Store, lo, hi int) error {
	for ctx.Err() == nil {
		t0 := time.Now()
		n, err := st.DrainOutboxBatch(ctx, benchDrainBatch, lo, hi)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40P01" {
			deadlocks.Add(1) // the batch rolled back; it is retried like a production drainer would
			continue
		}
		if err != nil {
			return ignoreCancel(err)
		}
		if n > 0 {
			timed("drain", t0)
		}
		t0 = time.Now()
		if _, err := st.DrainRollupRechecks(ctx, 100, lo, hi); err != nil {
			return ignoreCancel(err)
		}
		timed("recheck", t0)
		if n < benchDrainBatch {
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
	return nil
}

func ignoreCancel(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// benchPool starts a private Postgres for the benchmark and returns a pool
// on a freshly migrated database.
func benchPool(b *testing.B, ctx context.Context) *pgxpool.Pool {
	b.Helper()
	settings := pgtest.QueueBenchSettings()
	if dir := os.Getenv("BENCH_LOG_DIR"); dir != "" {
		// Profiling: the server log goes to dir/pg.log; with BENCH_EXPLAIN_MS
		// every statement (nested in plpgsql too) slower than that is logged
		// with its EXPLAIN ANALYZE.
		for k, v := range map[string]string{"logging_collector": "on", "log_directory": dir, "log_filename": "pg.log"} {
			settings[k] = v
		}
		if ms := os.Getenv("BENCH_EXPLAIN_MS"); ms != "" {
			for k, v := range map[string]string{"session_preload_libraries": "auto_explain",
				"auto_explain.log_min_duration": ms, "auto_explain.log_nested_statements": "on",
				"auto_explain.log_analyze": "on", "auto_explain.log_level": "warning", "auto_explain.log_buffers": "on"} {
				settings[k] = v
			}
		}
	}
	if os.Getenv("BENCH_STATEMENTS") != "" {
		// Profiling: per-statement totals, nested plpgsql statements included,
		// printed after the run (printStatements).
		settings["shared_preload_libraries"] = "pg_stat_statements"
		settings["pg_stat_statements.track"] = "all"
	}
	url := pgtest.BenchURL(b, settings)
	cfg, err := pgpool.Config(url, 16)
	if err != nil {
		b.Fatal(err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err == nil && os.Getenv("BENCH_STATEMENTS") != "" {
		_, err = pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	return pool
}

func mustExec(b *testing.B, pool *pgxpool.Pool, sql string, args ...any) {
	b.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		b.Fatal(err)
	}
}

// printStatements prints the statements that took the most execution time
// (BENCH_STATEMENTS=1): where the database spent the run.
func printStatements(ctx context.Context, pool *pgxpool.Pool) {
	rows, err := pool.Query(ctx, `
SELECT round(total_exec_time)::bigint, calls, rows, round((total_exec_time / greatest(calls, 1))::numeric, 3),
       left(regexp_replace(query, '\s+', ' ', 'g'), 160)
  FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 40`)
	if err != nil {
		fmt.Println("  pg_stat_statements:", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var total, calls, nrows int64
		var mean float64
		var q string
		if err := rows.Scan(&total, &calls, &nrows, &mean, &q); err != nil {
			fmt.Println("  pg_stat_statements:", err)
			return
		}
		fmt.Printf("  %8dms %7d calls %8d rows %9.3fms/call  %s\n", total, calls, nrows, mean, q)
	}
}

// resourcesHotPct is the share of resources updates that were heap-only
// over the run. Backends publish their table counters when idle (within
// ~10 s), so it waits for two equal reads a second apart; -1 if unreadable.
func resourcesHotPct(ctx context.Context, pool *pgxpool.Pool) float64 {
	var prev, upd, hot int64 = -1, 0, 0
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		if err := pool.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'resources'`).Scan(&upd, &hot); err != nil {
			return -1
		}
		if upd == prev && upd > 0 {
			break
		}
		prev = upd
	}
	if upd == 0 {
		return -1
	}
	return 100 * float64(hot) / float64(upd)
}
