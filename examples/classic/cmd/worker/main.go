// Command worker serves the classic demo's kinds (classicbom, bom, account,
// vpc v1 and v2, tgw, route, statussink) to a broker. FAKE_DELETE_DELAY (a Go
// duration, default 5s) paces every kind's finalizer teardown. The broker
// refuses a worker without a credential (WORKER_TOKEN, or a client
// certificate); against devstack:
//
//	BROKER_URL=http://127.0.0.1:8080 WORKER_TOKEN=<the worker token devstack printed> \
//	  go run ./examples/classic/cmd/worker
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/core/shutdown"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/classic"
)

func main() {
	// SIGTERM drains the running tasks; a second signal exits at once.
	ctx, stop := shutdown.Context(context.Background(), "classic worker", nil)
	err := run(ctx, os.Args[1:], os.Getenv)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "classic worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	broker := fs.String("broker", getenv("BROKER_URL"), "the broker's URL (env BROKER_URL)")
	id := fs.String("id", getenv("WORKER_ID"), "this worker's id (env WORKER_ID)")
	parallel := fs.Int("max-parallel", 0, "concurrent tasks (env WORKER_MAX_PARALLEL, default 64)")
	drain := fs.Duration("drain-timeout", 0, "how long running tasks may finish on shutdown (env WORKER_DRAIN_TIMEOUT, default 50s)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *broker == "" {
		return errors.New("no broker: set --broker or BROKER_URL")
	}
	log, err := logging.FromEnv()
	if err != nil {
		return err
	}
	opts, err := worker.OptionsFromEnv()
	if err != nil {
		return err
	}
	demo, err := classic.OptionsFromEnv(getenv)
	if err != nil {
		return err
	}
	log = log.With().Str("component", "classic-worker").Logger()
	opts.WorkerID, opts.Logger = *id, log
	if *parallel > 0 {
		opts.MaxParallel = *parallel
	}
	if *drain > 0 {
		opts.DrainTimeout = *drain
	}
	log.Info().Str("broker", *broker).Dur("fake_delete_delay", demo.DeleteDelay).Msg("classic worker starting")
	return worker.Serve(ctx, *broker, opts, classic.NewProviders(log, demo)...)
}
