// Command bench is the end-to-end benchmark (`just bench N`): a private
// Postgres at Postgres' default durability, a real `converge` process
// (ROLE=all) and a real classic worker process connected over loopback
// Connect. It applies bom roots whose composers fan out into N leaves
// (accounts → VPCs → routes, wired by dependency edges and value flows),
// waits until every root has rolled up READY, and prints one line:
//
//	bench: n=<N> resources_per_sec=<f> ready_p50_ms=<f> ready_p99_ms=<f> rollup_ms=<f> converge_rss_mb=<f> worker_rss_mb=<f>
//	  leaf_per_sec=<f> tail_ms=<f> pg_cpu_ms_per_leaf=<f> converge_cpu_ms_per_leaf=<f> worker_cpu_ms_per_leaf=<f>
//	  first_leaf_ms=<f> cpu_cores=<f> converge_rss_end_mb=<f> worker_rss_end_mb=<f> probe_polls=<n> probe_pg_cpu_ms=<f>
//	  converge_io_calls_per_leaf=<f> worker_io_calls_per_leaf=<f> converge_rss_mean_mb=<f> worker_rss_mean_mb=<f>
//	  host_syscall_us=<f> host_rtt_us=<f> seq_rows_per_leaf=<f> outbox_seq_rows_per_leaf=<f> pg_buffers_per_leaf=<f>
//	  wal_bytes_per_leaf=<f> wal_records_per_leaf=<f>
//	  [river_jobs_per_sec=<f> ratio=<f> river_n=<n> river_pg_cpu_ms_per_job=<f> river_cpu_ms_per_job=<f>]
//
// (one line; wrapped here). The run starts at the first measured root's
// apply (its created_at). n counts the leaves. resources_per_sec is n over
// the wall time from the start to the last root's READY (rollups included);
// leaf_per_sec is n over the time from the start to the last leaf's READY;
// tail_ms is the last root's READY after the last leaf's; first_leaf_ms
// the first leaf's READY after the start. ready_p50/p99 is
// each leaf's READY time after its root's apply. rollup_ms is the median,
// over roots, of root READY after its last leaf's READY. Times are the
// database's own timestamps, read back after the run.
//
// The CPU figures are user + system time from /proc/<pid>/stat, sampled
// just before the first root's apply and once the probe has seen every
// root READY, divided by n: Postgres' whole process tree (postmaster,
// backends, auxiliary processes, with the postmaster's cumulative times of
// children that exited), converge, the worker. cpu_cores is their sum over
// the same window's wall time: how many cores the stack kept busy (about
// the core count when CPU-bound, far below it in a stall). converge_rss_mb and
// worker_rss_mb are peak RSS (VmHWM); *_rss_end_mb the current RSS (VmRSS)
// at the end; *_rss_mean_mb the RSS averaged over the window, sampled every
// 100 ms (see rssSampler: a longer run's peak is the largest of more
// swings). probe_polls and probe_pg_cpu_ms are the bench's own load on the
// database while it waits (included in pg_cpu_ms_per_leaf): see probe.
// converge_io_calls_per_leaf and worker_io_calls_per_leaf are each
// process's read- and write-class system calls (/proc/<pid>/io syscr +
// syscw) over the same window, divided by n: the stream messages and the
// database round trips a leaf costs, on the wire. seq_rows_per_leaf is the
// rows Seq Scans read from the tables that grow with the fleet over the
// same window, divided by n (stack.SeqRowsRead): a plan trap's signature,
// near zero in a healthy run. outbox_seq_rows_per_leaf is the same for the
// outbox's partitions, apart: the drain's pops read small partitions whole
// (see stack.SeqRows). pg_buffers_per_leaf is the buffers the database's
// backends touched over the window, divided by n (stack.BuffersTouched): a
// probe by the wrong index columns reads no row by a Seq Scan, and shows
// here as hundreds of pages a leaf. A table whose Seq Scans read a tenth of
// a row a leaf or more is named on a bench-seq: line before the line.
// wal_bytes_per_leaf and wal_records_per_leaf are the write-ahead log the
// whole cluster wrote over the window (pg_stat_wal, autovacuum's included),
// divided by n: a leaf's write set, as the log sees it — a record for
// every row written or locked and every index entry.
//
// With -statements N the cluster tracks statements (pg_stat_statements,
// nested ones included, planning too: a small cost on every statement) and
// the top N of the measured window are printed before the line, as
// bench-stmt: lines.
//
// With -update every measured root is then applied again with a spec that
// changes every leaf's, and the rollout is timed until every root is READY
// again: a bench-update: line, printed before the bench: line (see
// update.go and followUp).
//
// With -teardown every measured root is then deleted as an operator deletes
// one, and the teardown is timed until none of their rows is left: a
// bench-teardown: line, printed before the bench: line (see teardown.go and
// followUp).
// The worker's simulated teardowns are instant (FAKE_DELETE_DELAY=0s).
//
// With -again (after -teardown) the emptied fleet tables are analyzed and
// the roots applied again: a bench-again: line, the creation's rate under
// statistics that size the fleet's tables at zero rows until the statistics
// guard analyzes them again (see again.go).
//
// With -river DIR (or -river-bin PATH) the River peer benchmark runs
// afterwards on the same Postgres (see river.go): river_jobs_per_sec is its
// line's figure, ratio is resources_per_sec over it.
//
// Postgres runs with its default durability (fsync, synchronous_commit and
// full_page_writes on) and the memory settings of bench-sched
// (shared_buffers=1GB, max_wal_size=8GB, checkpoint_timeout=30min). The
// roots are applied through core/store from this process (the GraphQL API
// is not in the measured path).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/shutdown"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/classic"
	"github.com/converge-run/converge/examples/stack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type params struct {
	n, perRoot, routes, parallel    int
	timeout, poll                   time.Duration
	riverDir, riverBin              string
	riverN, riverWorkers            int
	statements                      int
	verbose, hold, update, teardown bool
	again                           bool
	pgSettings                      map[string]string
}

func parseParams() (params, error) {
	p := params{pgSettings: map[string]string{"shared_buffers": "1GB", "max_wal_size": "8GB", "checkpoint_timeout": "30min"}}
	flag.IntVar(&p.n, "n", 10000, "leaf resources (rounded up to whole roots)")
	flag.IntVar(&p.perRoot, "leaves-per-root", 1000, "leaves each bom root composes (rounded down to whole teams)")
	flag.IntVar(&p.routes, "routes-per-team", 2, "routes per team (a team is 1 account + 1 VPC + its routes)")
	flag.IntVar(&p.parallel, "worker-parallel", 256, "the worker's WORKER_MAX_PARALLEL")
	flag.DurationVar(&p.timeout, "timeout", 60*time.Minute, "give up after this long")
	flag.BoolVar(&p.verbose, "v", false, "show the children's logs (warnings and errors) and the stack's URLs")
	flag.Func("pg", "an extra Postgres setting NAME=VALUE (repeatable), e.g. for auto_explain", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("want NAME=VALUE, got %q", v)
		}
		p.pgSettings[k] = val
		return nil
	})
	flag.BoolVar(&p.hold, "hold", false, "keep the stack up after measuring, until Ctrl+C (to inspect /metrics or the database)")
	flag.DurationVar(&p.poll, "poll", 250*time.Millisecond, "how often the probe reads the bom phase counts")
	flag.StringVar(&p.riverDir, "river", "", "also run the River peer benchmark built from this module directory (e.g. /work/shared/peers/riverbench)")
	flag.StringVar(&p.riverBin, "river-bin", "", "also run this prebuilt River peer benchmark binary")
	flag.IntVar(&p.riverN, "river-n", 0, "River jobs (0 = max(n, 20000))")
	flag.IntVar(&p.riverWorkers, "river-workers", 2000, "River's MaxWorkers")
	flag.BoolVar(&p.update, "update", false, "then apply every measured root again with a spec that changes every leaf, and time the rollout (a bench-update: line)")
	flag.BoolVar(&p.teardown, "teardown", false, "then delete every measured root and time the teardown (a bench-teardown: line)")
	flag.BoolVar(&p.again, "again", false, "with -teardown: then analyze the emptied fleet tables, apply the roots again and time it (a bench-again: line)")
	flag.IntVar(&p.statements, "statements", 0, "track statements (pg_stat_statements) and print the top N before the line, as bench-stmt: lines")
	flag.Parse()
	if p.statements > 0 {
		for k, v := range stack.StatementSettings() {
			if _, set := p.pgSettings[k]; !set {
				p.pgSettings[k] = v
			}
		}
	}
	if p.again && !p.teardown {
		return p, fmt.Errorf("-again applies the fleet again after its teardown: it needs -teardown")
	}
	if len(flag.Args()) == 1 { // `just bench 100000`
		if _, err := fmt.Sscan(flag.Arg(0), &p.n); err != nil {
			return p, fmt.Errorf("argument N %q: want an integer", flag.Arg(0))
		}
	}
	return p, nil
}

func run() error {
	p, err := parseParams()
	if err != nil {
		return err
	}
	perTeam := 2 + p.routes
	teams := max(p.perRoot/perTeam, 1)
	leavesPerRoot := teams * perTeam
	roots := (p.n + leavesPerRoot - 1) / leavesPerRoot
	n := roots * leavesPerRoot

	log, err := logging.FromEnv()
	if err != nil {
		return err
	}
	// Ctrl+C stops the stack in order; a second one kills its processes at
	// once and exits.
	var running atomic.Pointer[stack.Stack]
	ctx, stop := shutdown.Context(context.Background(), "bench", func() {
		if st := running.Load(); st != nil {
			st.Abandon()
		}
	})
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()

	if p.riverBin == "" && p.riverDir != "" { // build first: a failure should not cost a run
		fmt.Fprintf(os.Stderr, "bench: building the river benchmark in %s…\n", p.riverDir)
		bin, cleanup, err := buildRiver(ctx, p.riverDir)
		if err != nil {
			return err
		}
		defer cleanup()
		p.riverBin = bin
	}
	if p.riverN == 0 {
		p.riverN = max(n, 20000)
	}

	host, err := measureHost()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: building and starting postgres, converge and the worker…\n")
	st, err := stack.Start(ctx, stackOptions(p, log))
	if err != nil {
		return err
	}
	running.Store(st)
	defer func() {
		if err := st.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: teardown:", err)
		}
	}()
	if p.verbose {
		pgPid, _ := st.PostgresPid()
		fmt.Fprintf(os.Stderr, "bench: converge %s (pid %d), worker pid %d, postgres pid %d, database %s\n", st.BaseURL, st.ConvergePid(), st.WorkerPid(), pgPid, st.DatabaseURL)
	}
	if err := warmUp(ctx, st); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: %d roots × %d teams × (account + vpc + %d routes) = %d leaves\n", roots, teams, p.routes, n)
	bom := classic.BOMSpec{Teams: teams, RoutesPerTeam: &p.routes}
	spec, _ := json.Marshal(bom)
	u, err := runWindow(ctx, st, p, roots, n, spec)
	if err != nil {
		return err
	}
	res, err := measure(ctx, st, n)
	if err != nil {
		return err
	}
	more, err := followUps(ctx, st, p, roots, n, bom, res.rate)
	if err != nil {
		return err
	}
	fmt.Println(formatLine(n, res, u, host) + more)
	if p.hold {
		hold(ctx, st, p.riverBin != "")
	}
	return nil
}

// followUps runs what comes after the measured run: the rollout and the
// teardown (their lines printed here) and River, whose fields it returns
// for the bench: line.
func followUps(ctx context.Context, st *stack.Stack, p params, roots, n int, bom classic.BOMSpec, rate float64) (string, error) {
	if p.update {
		up, err := runUpdate(ctx, st, p, roots, n, bom)
		if err != nil {
			return "", err
		}
		fmt.Println(up)
	}
	if p.teardown {
		td, err := runTeardown(ctx, st, p, roots, n)
		if err != nil {
			return "", err
		}
		fmt.Println(td)
	}
	if p.again {
		spec, err := json.Marshal(bom)
		if err != nil {
			return "", err
		}
		ag, err := runAgain(ctx, st, p, roots, n, spec)
		if err != nil {
			return "", err
		}
		fmt.Println(ag)
	}
	if p.riverBin == "" {
		return "", nil
	}
	// River gets the server to itself: converge and the worker stop first
	// (the probe and the stack's pool only idle).
	if err := st.StopProcesses(); err != nil {
		return "", err
	}
	rr, err := runRiver(ctx, st, p.riverBin, p.riverN, p.riverWorkers)
	if err != nil {
		return "", err
	}
	return riverFields(rr, rate), nil
}

// stackOptions: durability stays at Postgres' defaults (fsync,
// synchronous_commit and full_page_writes on); memory and checkpoint
// spacing match bench-sched.
func stackOptions(p params, log zerolog.Logger) stack.Options {
	opts := stack.Options{Addr: "127.0.0.1:0", Log: log,
		PGSettings:  p.pgSettings,
		ConvergeEnv: []string{"LOG_LEVEL=warn"},
		WorkerEnv: []string{"LOG_LEVEL=warn", fmt.Sprintf("WORKER_MAX_PARALLEL=%d", p.parallel),
			"FAKE_DELETE_DELAY=0s"},
		Setup: setup}
	if !p.verbose {
		opts.Output = discard{}
	}
	return opts
}

// hold keeps what is still up until Ctrl+C.
func hold(ctx context.Context, st *stack.Stack, riverRan bool) {
	held := st.BaseURL + " and " + st.DatabaseURL
	if riverRan {
		held = st.DatabaseURL + " (converge and the worker stopped for River)"
	}
	fmt.Fprintf(os.Stderr, "bench: holding %s until Ctrl+C\n", held)
	<-ctx.Done()
}

// setup applies the demo's kinds with instant, failure-free leaves (no
// reactor binding: the bench measures the reconcile path).
func setup(ctx context.Context, st *stack.Stack) error {
	a := apply.StoreApplier{Store: st.Store, Actor: "bench"}
	docs, err := apply.Load(classic.Fixtures, classic.FixturesDir, func(d apply.Document) bool {
		return d.Type == apply.TypeManifest
	})
	if err != nil {
		return err
	}
	if err := apply.All(ctx, a, docs); err != nil {
		return err
	}
	for _, kind := range []string{classic.KindAccount, classic.KindVPC, classic.KindRoute} {
		if err := a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: kind, Name: "default", IsDefault: true,
			Spec: json.RawMessage(`{"latency_ms":0,"jitter_ms":0,"failure_rate":0}`)}); err != nil {
			return fmt.Errorf("apply %s providerconfig: %w", kind, err)
		}
	}
	return nil
}

// warmUp runs one small bom through the pipeline, so the worker is
// connected and the caches are warm before timing starts.
func warmUp(ctx context.Context, st *stack.Stack) error {
	a := apply.StoreApplier{Store: st.Store, Actor: "bench"}
	if err := a.ApplyResource(ctx, apply.Resource{Kind: classic.KindBOM, Name: "warmup", Spec: json.RawMessage(`{"teams":1}`)}); err != nil {
		return fmt.Errorf("apply warm-up bom: %w", err)
	}
	return waitReady(ctx, st, "warmup")
}

func waitReady(ctx context.Context, st *stack.Stack, name string) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r, err := st.Store.GetResource(ctx, classic.KindBOM, name)
		switch {
		case err == nil && r.Ready:
			return nil
		case err == nil && r.Phase == resource.PhaseFailed && r.FailureTerminal:
			conds, _ := st.Store.Conditions(ctx, r.ID)
			return fmt.Errorf("bom %s failed terminally: %+v", name, conds)
		}
		if err := st.Exited(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bom %s not ready: %w", name, ctx.Err())
		case <-tick.C:
		}
	}
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }
