// Command devstack runs the whole system locally with one command:
//
//	go run ./cmd/devstack
//
// It starts a private Postgres (Postgres' default durability), the converge
// server (ROLE=all, built from this tree) and a demo's worker, applies the
// demo's kind manifests, providerconfigs and reactor bindings and its
// samples, prints the URLs, and on Ctrl+C (or SIGTERM) stops the worker,
// then converge, then Postgres — leaving nothing running; a second Ctrl+C
// kills them at once. --demo picks the demo: classic (the default),
// datadriven or all.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/shutdown"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/classic"
	"github.com/converge-run/converge/examples/datadriven"
	"github.com/converge-run/converge/examples/stack"
)

// demo is what --demo selects: the fixtures to apply, the worker that
// serves their kinds and the samples to report on.
type demo struct {
	docs          []apply.Document
	datadriven    bool     // point the jobsaga reactor at this stack's API
	workerPackage string   // "" = stack.WorkerPackage (classic)
	workerEnv     []string // extra worker settings
	samples       []apply.Resource
}

// DatadrivenWorkerPackage serves the datadriven demo (and, with DEMO=all,
// the classic one).
const DatadrivenWorkerPackage = "github.com/converge-run/converge/examples/datadriven/cmd/worker"

func selectDemo(name string, withSamples bool) (demo, error) {
	var d demo
	var loaders []func(bool) ([]apply.Document, error)
	switch name {
	case "classic":
		loaders = append(loaders, classic.Documents)
	case "datadriven":
		loaders = append(loaders, datadriven.Documents)
		d.workerPackage, d.datadriven = DatadrivenWorkerPackage, true
	case "all":
		loaders = append(loaders, classic.Documents, datadriven.Documents)
		d.workerPackage, d.workerEnv, d.datadriven = DatadrivenWorkerPackage, []string{"DEMO=all"}, true
	default:
		return d, fmt.Errorf("--demo %q: want classic, datadriven or all", name)
	}
	for _, load := range loaders {
		docs, err := load(withSamples)
		if err != nil {
			return d, err
		}
		d.docs = append(d.docs, docs...)
	}
	// Each demo's documents come in apply order and need none of the
	// other demo's, so they are applied one demo after the other.
	for _, doc := range d.docs {
		var r apply.Resource
		if doc.Type == apply.TypeResource && json.Unmarshal(doc.Raw, &r) == nil {
			d.samples = append(d.samples, r)
		}
	}
	return d, nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8080", "converge's listen address, host:port (port 0 picks a free one)")
	dataDir := flag.String("data-dir", "", "keep the database in this directory between runs (default: a temporary one, removed on exit)")
	noSample := flag.Bool("no-sample", false, "do not apply the demo's samples (the kinds, configs and bindings are still applied)")
	demoName := flag.String("demo", "classic", "the demo to run: classic, datadriven or all")
	pgPort := flag.Int("pg-port", 0, "loopback port for the private Postgres (default: a free one)")
	convergeBin := flag.String("converge-bin", "", "a prebuilt converge binary (default: built from this tree)")
	workerBin := flag.String("worker-bin", "", "a prebuilt worker binary for the demo (default: built from this tree)")
	top := topologyFlags()
	flag.Parse()

	log, err := logging.FromEnv()
	if err != nil {
		return err
	}
	// Ctrl+C stops the stack in order; a second one kills its processes at
	// once and exits.
	var running atomic.Pointer[stack.Stack]
	ctx, stop := shutdown.Context(context.Background(), "devstack", func() {
		if st := running.Load(); st != nil {
			st.Abandon()
		}
	})
	defer stop()

	dm, err := selectDemo(*demoName, !*noSample)
	if err != nil {
		return err
	}
	st, err := stack.Start(ctx, stack.Options{
		Addr: *addr, DataDir: *dataDir, PGPort: *pgPort, ConvergeBin: *convergeBin, WorkerBin: *workerBin, Log: log, Topology: *top,
		WorkerPackage: dm.workerPackage, APIToken: true,
		// Keep Ctrl+C snappy: in-flight demo tasks take about a second.
		ConvergeEnv: []string{"SHUTDOWN_DRAIN=10s"},
		WorkerEnv:   append([]string{"WORKER_DRAIN_TIMEOUT=10s"}, dm.workerEnv...),
		Setup:       applyDemo(dm, *demoName, !*noSample, log),
	})
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted during start-up")
		}
		if errors.Is(err, stack.ErrAddrInUse) {
			return fmt.Errorf("--addr %w", err)
		}
		return err
	}
	running.Store(st)
	defer func() {
		if err := st.Stop(); err != nil {
			log.Warn().Err(err).Msg("devstack teardown")
		}
		log.Info().Msg("devstack stopped")
	}()

	fmt.Printf("graphql: %s/graphql\n", st.BaseURL)
	fmt.Printf("graphiql: %s/graphiql\n", st.BaseURL)
	fmt.Printf("ui: %s/\n", st.BaseURL)
	fmt.Printf("admin token: %s\n", st.AdminToken)
	fmt.Printf("worker token: %s\n", st.WorkerToken)
	if top.Cluster() {
		printMembers(st)
	}
	fmt.Printf("ready: %s\n", st.BaseURL)
	for _, r := range dm.samples {
		go reportSample(ctx, st, log, r.Kind, r.Name)
	}

	if top.Cluster() {
		return watchCluster(ctx, st, os.Stdin, log)
	}
	return waitForExit(ctx, st, log)
}

// applyDemo is the stack's Setup: it prints the database URL and applies the
// demo's documents (and points the datadriven saga at this stack's API).
func applyDemo(dm demo, name string, samples bool, log zerolog.Logger) func(context.Context, *stack.Stack) error {
	docs := dm.docs
	return func(ctx context.Context, st *stack.Stack) error {
		fmt.Printf("database: %s\n", st.DatabaseURL)
		// The documents go through core/store in-process today. When
		// conctl and the GraphQL API land, an Applier backed by them
		// replaces this one and nothing else changes.
		var applier apply.Applier = apply.StoreApplier{Store: st.Store, Actor: "devstack"}
		actx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := apply.All(actx, applier, docs); err != nil {
			return err
		}
		if dm.datadriven {
			if err := applier.ApplyProviderConfig(actx, datadriven.SagaConfigFor(st.BaseURL, st.AdminToken)); err != nil {
				return fmt.Errorf("point jobsaga at %s: %w", st.BaseURL, err)
			}
		}
		for _, d := range docs {
			log.Debug().Str("type", string(d.Type)).Str("file", d.Path).Msg("applied")
		}
		log.Info().Str("demo", name).Int("documents", len(docs)).Bool("sample", samples).Msg("applied the demo's fixtures")
		return nil
	}
}

// waitForExit runs until Ctrl+C or a child's exit.
func waitForExit(ctx context.Context, st *stack.Stack, log zerolog.Logger) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info().Msg("stopping: worker, then converge, then postgres")
			return nil
		case <-tick.C:
			if err := st.Exited(); err != nil {
				return err
			}
		}
	}
}

// reportSample logs once a sample has rolled up READY.
func reportSample(ctx context.Context, st *stack.Stack, log zerolog.Logger, kind, name string) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r, err := st.Store.GetResource(ctx, kind, name)
		if err != nil || r.Phase != resource.PhaseReady {
			continue
		}
		log.Info().Str("kind", kind).Str("name", name).RawJSON("status", r.Status).Msg("the sample " + kind + " is Ready")
		return
	}
}
