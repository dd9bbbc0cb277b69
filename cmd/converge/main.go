// Command converge is the control plane binary: `converge` (or `converge
// serve`) runs the process its ROLE selects (all, control or broker) from the
// environment; `converge migrate up|down|status` manages the schema.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/logging"
	"github.com/converge-run/converge/core/shutdown"
	"github.com/converge-run/converge/db/migrate"
)

// BuildVersion is stamped by `just build` from git describe.
var BuildVersion = "dev"

func main() {
	// SIGTERM drains; a second signal exits at once.
	ctx, stop := shutdown.Context(context.Background(), "converge", nil)
	err := rootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "converge:", err)
		os.Exit(1)
	}
}

func rootCmd() *cobra.Command {
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane and/or broker (ROLE=all|control|broker)",
		Long: `Runs the duties ROLE selects. Configuration comes from the environment:
DATABASE_URL (required), ROLE, LISTEN_ADDR, the TLS_*, *_TOKENS_FILE and
*_AUTH credentials, the WORKER_* and API_* limits and more; every variable,
its default and its meaning is in docs/operations.md ("Configuration"), the
credentials in docs/security.md. A value out of range is refused at start,
naming the variable.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return serveMain(cmd.Context(), os.Getenv) },
	}
	root := &cobra.Command{
		Use:           "converge",
		Short:         "Converge: a Postgres-only control plane",
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          serve.RunE,
	}
	root.AddCommand(serve, migrateCmd(os.Getenv), &cobra.Command{
		Use:   "version",
		Short: "Print the build version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Println(BuildVersion) },
	})
	return root
}

// migrateEnv reads what `converge migrate` needs: DATABASE_URL and
// DB_IAM_AUTH, refused as serve refuses them.
func migrateEnv(getenv func(string) string) (url string, iam bool, err error) {
	url = getenv("DATABASE_URL")
	if url == "" {
		return "", false, errors.New("DATABASE_URL is not set")
	}
	if v := getenv("DB_IAM_AUTH"); v != "" {
		if iam, err = strconv.ParseBool(v); err != nil {
			return "", false, fmt.Errorf("DB_IAM_AUTH=%q: want true or false", v)
		}
	}
	return url, iam, nil
}

func migrateCmd(getenv func(string) string) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, roll back or show the schema migrations (DATABASE_URL)",
		Example: `  DATABASE_URL=postgres://localhost/converge converge migrate up
  converge migrate status
  converge migrate down`,
		// A typo or a missing command fails: in a Job, help and exit 0
		// would pass for a migration.
		RunE: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("migrate needs a command: up, down or status")
			}
			return fmt.Errorf("unknown migrate command %q: want up, down or status", args[0])
		},
	}
	// Every subcommand logs as serve does (LOG_FORMAT, LOG_LEVEL) and takes
	// the IAM token hook through serve's own check: TLS required, and a
	// warning for a URL whose TLS does not verify the server.
	run := func(f func(context.Context, *migrate.Runner, zerolog.Logger) error) func(*cobra.Command, []string) error {
		return func(cmd *cobra.Command, _ []string) error {
			url, iam, err := migrateEnv(getenv)
			if err != nil {
				return err
			}
			log, err := logging.New(getenv("LOG_FORMAT"), getenv("LOG_LEVEL"), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			hook, err := app.AuthHook(cmd.Context(), config.Config{DatabaseURL: url, DBIAMAuth: iam}, log)
			if err != nil {
				return err
			}
			r, err := migrate.OpenWith(url, migrate.Options{BeforeConnect: hook, Log: log})
			if err != nil {
				return err
			}
			defer r.Close()
			return f(cmd.Context(), r, log)
		}
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "up",
		Args:  cobra.NoArgs,
		Short: "Apply the function set and every pending migration (under a session advisory lock)",
		RunE:  run(app.MigrateUp),
	}, &cobra.Command{
		Use:   "down",
		Args:  cobra.NoArgs,
		Short: "Roll back the most recent migration",
		RunE: run(func(ctx context.Context, r *migrate.Runner, _ zerolog.Logger) error {
			name, err := r.Down(ctx)
			if err != nil {
				return err
			}
			fmt.Println("rolled back", name)
			fmt.Println("the function set's record is cleared: restart the converge pods, and the release they run " +
				"puts its own function bodies back at boot")
			return nil
		}),
	}, &cobra.Command{
		Use:   "status",
		Args:  cobra.NoArgs,
		Short: "List the migrations and the function set, and whether each is applied",
		RunE: run(func(ctx context.Context, r *migrate.Runner, _ zerolog.Logger) error {
			return r.Status(ctx, os.Stdout)
		}),
	})
	return cmd
}
