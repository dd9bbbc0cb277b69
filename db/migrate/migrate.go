// Package migrate applies the embedded goose migrations (db/migrations).
//
// Every pod migrates at boot. The runner holds a Postgres session advisory
// lock while it works, so of several pods booting at once exactly one applies
// the pending migrations and the others wait, then find nothing to do.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"io/fs"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/converge-run/converge/db/migrations"
)

// Runner applies, rolls back and reports the schema migrations of one database.
type Runner struct {
	db       *sql.DB
	provider *goose.Provider
}

// Open connects to databaseURL and prepares a runner over the embedded
// migrations. beforeConnect, when not nil, runs before every new physical
// connection (the IAM token hook).
func Open(databaseURL string, beforeConnect func(context.Context, *pgx.ConnConfig) error) (*Runner, error) {
	return OpenFS(databaseURL, migrations.FS, beforeConnect)
}

// OpenFS is Open over another set of migration files (development and tests).
func OpenFS(databaseURL string, fsys fs.FS, beforeConnect func(context.Context, *pgx.ConnConfig) error) (*Runner, error) {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	var opts []stdlib.OptionOpenDB
	if beforeConnect != nil {
		opts = append(opts, stdlib.OptionBeforeConnect(beforeConnect))
	}
	db := stdlib.OpenDB(*cfg, opts...)
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("create migration lock: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return &Runner{db: db, provider: p}, nil
}

// Close releases the runner's connections.
func (r *Runner) Close() error { return r.db.Close() }

// Up applies every pending migration and returns how many it applied.
func (r *Runner) Up(ctx context.Context) (int, error) {
	res, err := r.provider.Up(ctx)
	if err != nil {
		return len(res), fmt.Errorf("migrate up: %w", err)
	}
	return len(res), nil
}

// Down rolls back the most recent migration.
func (r *Runner) Down(ctx context.Context) error {
	if _, err := r.provider.Down(ctx); err != nil {
		return fmt.Errorf("migrate down: %w", err)
	}
	return nil
}

// DownTo rolls back every migration newer than version (0 = all).
func (r *Runner) DownTo(ctx context.Context, version int64) error {
	if _, err := r.provider.DownTo(ctx, version); err != nil {
		return fmt.Errorf("migrate down to %d: %w", version, err)
	}
	return nil
}

// Version is the current schema version (0 = empty database).
func (r *Runner) Version(ctx context.Context) (int64, error) {
	v, err := r.provider.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// Status writes one line per known migration: version, state, file.
func (r *Runner) Status(ctx context.Context, w io.Writer) error {
	st, err := r.provider.Status(ctx)
	if err != nil {
		return fmt.Errorf("migration status: %w", err)
	}
	for _, s := range st {
		applied := "pending"
		if s.State == goose.StateApplied {
			applied = "applied " + s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(w, "%05d  %-30s  %s\n", s.Source.Version, applied, s.Source.Path)
	}
	return nil
}

// Up is a convenience: open, apply everything pending, close.
func Up(ctx context.Context, databaseURL string) error {
	return UpFS(ctx, databaseURL, migrations.FS)
}

// UpFS is Up over another set of migration files.
func UpFS(ctx context.Context, databaseURL string, fsys fs.FS) error {
	r, err := OpenFS(databaseURL, fsys, nil)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = r.Up(ctx)
	return err
}
