package main

import (
	"context"
	"errors"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/gcpace"
	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/core/memlimit"
)

// serveMain reads the configuration through getenv and runs the process.
// Every refusal of the environment is reported at once (the server's
// configuration, the log settings, the API limits), not the first alone.
func serveMain(ctx context.Context, getenv func(string) string) error {
	cfg, cfgErr := config.Parse(getenv, BuildVersion)
	log, logErr := logging.New(getenv("LOG_FORMAT"), getenv("LOG_LEVEL"), nil)
	ms, mountErr := mounts(getenv)
	if err := errors.Join(cfgErr, logErr, mountErr); err != nil {
		return err
	}
	memlimit.ApplyAndLog(log)
	gcpace.StartAndLog(log)
	return app.Run(ctx, cfg, log, app.Options{Mounts: ms})
}
