// Command devstack runs the whole system locally with one command:
//
//	go run ./cmd/devstack
//
// It starts a private Postgres from the machine's server binaries (durable
// Postgres defaults), migrates it and prints its URL, then waits for Ctrl+C
// and tears everything down.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/db/migrate"
	"github.com/converge-run/converge/db/pgcluster"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func run() error {
	dataDir := flag.String("data-dir", "", "keep the database in this directory between runs (default: a temporary one, removed on exit)")
	pgPort := flag.Int("pg-port", 0, "loopback port for the private Postgres (default: a free one)")
	flag.Parse()

	log, err := logging.FromEnv()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	pg, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: *dataDir, Port: *pgPort, Logger: log})
	if err != nil {
		return err
	}
	defer func() {
		if err := pg.Stop(); err != nil {
			log.Warn().Err(err).Msg("stop postgres")
		}
		log.Info().Msg("devstack stopped")
	}()
	mctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := pg.CreateDatabase(mctx, "converge"); err != nil {
		return err
	}
	dbURL := pg.URL("converge")
	if err := migrate.Up(mctx, dbURL); err != nil {
		return err
	}
	fmt.Printf("database: %s\n", dbURL)
	fmt.Println("ready: press Ctrl+C to stop")
	<-ctx.Done()
	return nil
}
