// Command devstack runs the whole system locally with one command:
//
//	go run ./cmd/devstack
//
// It starts a private Postgres (Postgres' default durability), the converge
// server (ROLE=all, built from this tree) and the classic demo's worker,
// applies the demo's kind manifests, providerconfigs and reactor binding and
// a sample bom, prints the URLs, and on Ctrl+C (or SIGTERM) stops the worker,
// then converge, then Postgres — leaving nothing running.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/classic"
	"github.com/converge-run/converge/examples/stack"
)

// sampleName is the bom resource-bom-sample.json applies.
const sampleName = "acme"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8080", "converge's listen address, host:port (port 0 picks a free one)")
	dataDir := flag.String("data-dir", "", "keep the database in this directory between runs (default: a temporary one, removed on exit)")
	noSample := flag.Bool("no-sample", false, "do not apply the sample bom (the kinds, configs and binding are still applied)")
	pgPort := flag.Int("pg-port", 0, "loopback port for the private Postgres (default: a free one)")
	convergeBin := flag.String("converge-bin", "", "a prebuilt converge binary (default: built from this tree)")
	workerBin := flag.String("worker-bin", "", "a prebuilt classic worker binary (default: built from this tree)")
	flag.Parse()

	log, err := logging.FromEnv()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	docs, err := classic.Documents(!*noSample)
	if err != nil {
		return err
	}
	st, err := stack.Start(ctx, stack.Options{
		Addr: *addr, DataDir: *dataDir, PGPort: *pgPort, ConvergeBin: *convergeBin, WorkerBin: *workerBin, Log: log,
		APIToken: true,
		// Keep Ctrl+C snappy: in-flight demo tasks take about a second.
		ConvergeEnv: []string{"SHUTDOWN_DRAIN=10s"},
		WorkerEnv:   []string{"WORKER_DRAIN_TIMEOUT=10s"},
		Setup: func(ctx context.Context, st *stack.Stack) error {
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
			for _, d := range docs {
				log.Debug().Str("type", string(d.Type)).Str("file", d.Path).Msg("applied")
			}
			log.Info().Int("documents", len(docs)).Bool("sample", !*noSample).Msg("applied the classic demo's fixtures")
			return nil
		},
	})
	if err != nil {
		if ctx.Err() != nil {
			return errors.New("interrupted during start-up")
		}
		return err
	}
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
	fmt.Printf("ready: %s\n", st.BaseURL)
	if !*noSample {
		go reportSample(ctx, st, log)
	}

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

// reportSample logs once the sample bom has rolled up READY.
func reportSample(ctx context.Context, st *stack.Stack, log zerolog.Logger) {
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r, err := st.Store.GetResource(ctx, classic.KindBOM, sampleName)
		if err != nil || r.Phase != resource.PhaseReady {
			continue
		}
		log.Info().Str("bom", sampleName).RawJSON("status", r.Status).Msg("the sample bom is Ready")
		return
	}
}
