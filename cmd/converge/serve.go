package main

import (
	"context"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/core/memlimit"
)

func serveMain(ctx context.Context) error {
	cfg, err := config.FromEnv(BuildVersion)
	if err != nil {
		return err
	}
	log, err := logging.New(cfg.LogFormat, cfg.LogLevel, nil)
	if err != nil {
		return err
	}
	memlimit.ApplyAndLog(log)
	ms, err := mounts()
	if err != nil {
		return err
	}
	return app.Run(ctx, cfg, log, app.Options{Mounts: ms})
}
