// Command worker serves the datadriven demo's kinds (celbom, stdstarlark,
// fakevpc, fakedb, fakeapp, faketerraform, fakek8sjob) to a broker; with
// --demo all (env DEMO=all) it serves the classic demo's kinds too, so one
// process hosts both demos. The broker refuses a worker without a
// credential (WORKER_TOKEN, or a client certificate); against devstack:
//
//	BROKER_URL=http://127.0.0.1:8080 WORKER_TOKEN=<the worker token devstack printed> \
//	  go run ./examples/datadriven/cmd/worker
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
	"github.com/converge-run/converge/examples/datadriven"
)

func main() {
	// SIGTERM drains the running tasks; a second signal exits at once.
	ctx, stop := shutdown.Context(context.Background(), "datadriven worker", nil)
	err := run(ctx, os.Args[1:], os.Getenv)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "datadriven worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string) error {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	broker := fs.String("broker", getenv("BROKER_URL"), "the broker's URL (env BROKER_URL)")
	id := fs.String("id", getenv("WORKER_ID"), "this worker's id (env WORKER_ID)")
	demo := fs.String("demo", getenv("DEMO"), "datadriven (default) or all: the classic demo's kinds too (env DEMO)")
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
	log = log.With().Str("component", "datadriven-worker").Logger()
	opts.WorkerID, opts.Logger = *id, log
	providers := datadriven.Providers(log)
	switch *demo {
	case "", "datadriven":
	case "all":
		co, err := classic.OptionsFromEnv(getenv)
		if err != nil {
			return err
		}
		providers = append(providers, classic.NewProviders(log, co)...)
	default:
		return fmt.Errorf("--demo %q: want datadriven or all", *demo)
	}
	log.Info().Str("broker", *broker).Int("kinds", len(providers)).Msg("datadriven worker starting")
	return worker.Serve(ctx, *broker, opts, providers...)
}
