// Command bench is the end-to-end benchmark (`just bench N`): a private
// Postgres at Postgres' default durability, a real `converge` process
// (ROLE=all) and a real classic worker process connected over loopback
// Connect. It applies bom roots whose composers fan out into N leaves
// (accounts → VPCs → routes, wired by dependency edges and value flows),
// waits until every root has rolled up READY, and prints one line:
//
//	bench: n=<N> resources_per_sec=<f> ready_p50_ms=<f> ready_p99_ms=<f> rollup_ms=<f> converge_rss_mb=<f> worker_rss_mb=<f>
//
// n counts the leaves. resources_per_sec is n over the wall time from the
// first root's apply to the last root's READY (rollups included).
// ready_p50/p99 is each leaf's READY time after its root's apply. rollup_ms
// is the median, over roots, of root READY after its last leaf's READY. The
// RSS figures are peak (VmHWM). Times are the database's own timestamps.
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
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/core/resource"
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
	n, perRoot, routes, parallel int
	timeout                      time.Duration
}

func run() error {
	var p params
	flag.IntVar(&p.n, "n", 10000, "leaf resources (rounded up to whole roots)")
	flag.IntVar(&p.perRoot, "leaves-per-root", 1000, "leaves each bom root composes (rounded down to whole teams)")
	flag.IntVar(&p.routes, "routes-per-team", 2, "routes per team (a team is 1 account + 1 VPC + its routes)")
	flag.IntVar(&p.parallel, "worker-parallel", 256, "the worker's WORKER_MAX_PARALLEL")
	flag.DurationVar(&p.timeout, "timeout", 60*time.Minute, "give up after this long")
	verbose := flag.Bool("v", false, "show the children's logs (warnings and errors) and the stack's URLs")
	pgSettings := map[string]string{"shared_buffers": "1GB", "max_wal_size": "8GB", "checkpoint_timeout": "30min"}
	flag.Func("pg", "an extra Postgres setting NAME=VALUE (repeatable), e.g. for auto_explain", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return fmt.Errorf("want NAME=VALUE, got %q", v)
		}
		pgSettings[k] = val
		return nil
	})
	hold := flag.Bool("hold", false, "keep the stack up after measuring, until Ctrl+C (to inspect /metrics or the database)")
	flag.Parse()
	if len(flag.Args()) == 1 { // `just bench 100000`
		if _, err := fmt.Sscan(flag.Arg(0), &p.n); err != nil {
			return fmt.Errorf("N %q: want an integer", flag.Arg(0))
		}
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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()

	// Durability stays at Postgres' defaults (fsync, synchronous_commit and
	// full_page_writes on); memory and checkpoint spacing match bench-sched.
	opts := stack.Options{Addr: "127.0.0.1:0", Log: log,
		PGSettings:  pgSettings,
		ConvergeEnv: []string{"LOG_LEVEL=warn"},
		WorkerEnv:   []string{"LOG_LEVEL=warn", fmt.Sprintf("WORKER_MAX_PARALLEL=%d", p.parallel)},
		Setup:       setup}
	if !*verbose {
		opts.Output = discard{}
	}
	fmt.Fprintf(os.Stderr, "bench: building and starting postgres, converge and the worker…\n")
	st, err := stack.Start(ctx, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err := st.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: teardown:", err)
		}
	}()
	if *verbose {
		fmt.Fprintf(os.Stderr, "bench: converge %s (pid %d), worker pid %d, database %s\n", st.BaseURL, st.ConvergePid(), st.WorkerPid(), st.DatabaseURL)
	}
	if err := warmUp(ctx, st); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "bench: %d roots × %d teams × (account + vpc + %d routes) = %d leaves\n", roots, teams, p.routes, n)
	spec, _ := json.Marshal(classic.BOMSpec{Teams: teams, RoutesPerTeam: &p.routes})
	if err := runRoots(ctx, st, roots, spec); err != nil {
		return err
	}
	res, err := measure(ctx, st, n)
	if err != nil {
		return err
	}
	convergeMB, workerMB, err := st.PeakRSSMB()
	if err != nil {
		return err
	}
	fmt.Printf("bench: n=%d resources_per_sec=%.1f ready_p50_ms=%.1f ready_p99_ms=%.1f rollup_ms=%.1f converge_rss_mb=%.1f worker_rss_mb=%.1f\n",
		n, res.rate, res.p50, res.p99, res.rollup, convergeMB, workerMB)
	if *hold {
		fmt.Fprintf(os.Stderr, "bench: holding %s and %s until Ctrl+C\n", st.BaseURL, st.DatabaseURL)
		<-ctx.Done()
	}
	return nil
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
