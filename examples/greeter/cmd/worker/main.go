// Command worker serves the greeting kind; --print-manifest prints its CRD.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/core/shutdown"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/greeter"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "greeter:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 1 && args[0] == "--print-manifest" {
		b, err := json.MarshalIndent(greeter.Manifest(), "", "  ")
		if err != nil {
			return err
		}
		fmt.Println(string(b))
		return nil
	}
	// SIGTERM drains the running tasks; a second signal exits at once.
	ctx, stop := shutdown.Context(context.Background(), "greeter", nil)
	defer stop()
	log, err := logging.FromEnv()
	if err != nil {
		return err
	}
	opts, err := worker.OptionsFromEnv()
	if err != nil {
		return err
	}
	opts.Logger = log
	return worker.Serve(ctx, os.Getenv("BROKER_URL"), opts, greeter.Provider{})
}
