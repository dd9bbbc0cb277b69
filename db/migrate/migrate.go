// Package migrate brings a database to this binary's schema: the function set
// (db/functions) and the versioned goose migrations (db/migrations).
//
// Every pod migrates at boot. The runner holds a Postgres session advisory
// lock while it works (goose's lock id, so runners of every version exclude
// each other), so of several pods booting at once exactly one applies what is
// pending and the others wait, then find nothing to do. They wait by asking
// for the lock every LockPoll, not in a blocked pg_advisory_lock: a
// statement blocked there is an open transaction, and a migration that
// builds an index CONCURRENTLY waits for every open transaction to end —
// for the waiters, who wait for it. The lock's session does nothing else,
// and a run checks it every LockCheck: if it is gone, so is the lock, and
// the run stops rather than migrate beside the next run to take it.
//
// Up applies, in this order, when this binary's function set is newer than
// the one the database records (see functions.go: an older binary never
// replaces newer function bodies):
//
//  1. the functions the database does not have yet, in one transaction: the
//     schema may name them (a CHECK, a generated column and every trigger
//     name a function) while a function body depends on nothing at creation
//     time; on a fresh database that is the whole set;
//  2. the pending versioned migrations, each in its own transaction (or
//     none, for one marked NO TRANSACTION: a concurrent index build). A
//     transactional migration waits at most LockTimeout for a lock, so it
//     never holds a table's traffic queued behind it for as long as some
//     long transaction runs; it rolls back and is tried again
//     (locktimeout.go);
//  3. every other function body, and the set's record, in one transaction.
//
// A changed body so goes in only over the schema it was written for: while
// a migration waits or after one failed, the database runs the bodies of
// the schema it has. Old pods run beside new ones, so a release's DDL must
// still work with the previous release's functions and Go queries (expand,
// then contract).
package migrate

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/db/functions"
	"github.com/converge-run/converge/db/migrations"
)

// LockID is the session advisory lock every migrate run holds: goose's
// default, so a runner and a bare goose provider exclude each other too.
const LockID = lock.DefaultLockID

// LockWait bounds the wait for another pod's migrate run (goose's own
// locker gave up after the same five minutes).
const LockWait = 5 * time.Minute

// LockCheck is how often a run checks that its lock session is alive.
const LockCheck = 5 * time.Second

// LockPoll is how often a waiting run asks for the lock again.
const LockPoll = 200 * time.Millisecond

// Runner applies, rolls back and reports the schema of one database.
type Runner struct {
	db          *sql.DB
	provider    *goose.Provider
	functions   functions.Set
	lockTimeout time.Duration
	log         zerolog.Logger
}

// Options configures a Runner beyond the embedded defaults.
type Options struct {
	// Migrations replaces the embedded db/migrations (development, tests).
	Migrations fs.FS
	// Functions replaces the embedded function set (tests).
	Functions *functions.Set
	// BeforeConnect, when not nil, runs before every new physical connection
	// (the IAM token hook).
	BeforeConnect func(context.Context, *pgx.ConnConfig) error
	// LockTimeout replaces LockTimeout (tests).
	LockTimeout time.Duration
	// Log receives the retries of a migration that timed out waiting for
	// its locks (the zero value logs nothing).
	Log zerolog.Logger
}

// Open connects to databaseURL and prepares a runner over the embedded
// migrations and function set. beforeConnect, when not nil, runs before every
// new physical connection (the IAM token hook).
func Open(databaseURL string, beforeConnect func(context.Context, *pgx.ConnConfig) error) (*Runner, error) {
	return OpenWith(databaseURL, Options{BeforeConnect: beforeConnect})
}

// OpenFS is Open over another set of migration files (development and tests).
func OpenFS(databaseURL string, fsys fs.FS, beforeConnect func(context.Context, *pgx.ConnConfig) error) (*Runner, error) {
	return OpenWith(databaseURL, Options{Migrations: fsys, BeforeConnect: beforeConnect})
}

// OpenWith is Open with options.
func OpenWith(databaseURL string, o Options) (*Runner, error) {
	if o.Migrations == nil {
		o.Migrations = migrations.FS
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = LockTimeout
	}
	fsys, err := withLockTimeout(o.Migrations, o.LockTimeout)
	if err != nil {
		return nil, err
	}
	var set functions.Set
	if o.Functions != nil {
		set = *o.Functions
	} else {
		s, err := functions.Embedded()
		if err != nil {
			return nil, fmt.Errorf("load function set: %w", err)
		}
		set = s
	}
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	opts := []stdlib.OptionOpenDB{stdlib.OptionAfterConnect(clearTimeouts)}
	if o.BeforeConnect != nil {
		opts = append(opts, stdlib.OptionBeforeConnect(o.BeforeConnect))
	}
	db := stdlib.OpenDB(*cfg, opts...)
	// No goose session locker: Up and Down hold LockID themselves, across
	// the function set and the migrations.
	p, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	return &Runner{db: db, provider: p, functions: set, lockTimeout: o.LockTimeout, log: o.Log}, nil
}

// clearTimeouts turns off, for a runner's session, the statement and lock
// timeouts a role, the database or the URL may set for applications: a
// migration is no runaway query, and a backfill or an index build
// CONCURRENTLY on a large table would outlast them on every boot (leaving
// an invalid index each time). The runner bounds lock waits itself
// (LockTimeout, on transactional migrations).
func clearTimeouts(ctx context.Context, conn *pgx.Conn) error {
	for _, set := range []string{"SET statement_timeout = 0", "SET lock_timeout = 0"} {
		if _, err := conn.Exec(ctx, set); err != nil {
			return fmt.Errorf("migrate session: %s: %w", set, err)
		}
	}
	return nil
}

// Close releases the runner's connections.
func (r *Runner) Close() error { return r.db.Close() }

// Report says what Up did.
type Report struct {
	// Migrations is the number of versioned migrations applied.
	Migrations int
	// Functions is what became of the function set.
	Functions FunctionsReport
	// InvalidIndexes names the indexes of the schema left invalid by a
	// concurrent build that failed: every write maintains them, no read
	// uses them, and no migration will build them again (one that recorded
	// itself over the leftover, as 00021 did before it dropped leftovers
	// first). REINDEX INDEX CONCURRENTLY rebuilds one.
	InvalidIndexes []string
}

// Up brings the database to this binary's function set and schema, under
// the migration lock.
func (r *Runner) Up(ctx context.Context) (Report, error) {
	var rep Report
	err := r.locked(ctx, func(ctx context.Context, conn *sql.Conn) error {
		plan, err := r.prepareFunctions(ctx, conn)
		rep.Functions = plan.rep
		if err != nil {
			return err
		}
		err = r.retryLocked(ctx, "migrate up", func() error {
			res, err := r.provider.Up(ctx)
			rep.Migrations += len(res)
			if pe := (*goose.PartialError)(nil); errors.As(err, &pe) {
				rep.Migrations += len(pe.Applied)
			}
			return err
		})
		if err != nil {
			return err
		}
		if rep.Functions, err = r.finishFunctions(ctx, conn, plan); err != nil {
			return err
		}
		rep.InvalidIndexes, err = invalidIndexes(ctx, conn)
		return err
	})
	return rep, err
}

// invalidIndexes lists the invalid indexes of the current schema.
func invalidIndexes(ctx context.Context, conn *sql.Conn) ([]string, error) {
	rows, err := conn.QueryContext(ctx, `SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
	    WHERE NOT i.indisvalid AND c.relnamespace = current_schema()::regnamespace ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list invalid indexes: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("list invalid indexes: %w", err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list invalid indexes: %w", err)
	}
	return names, nil
}

// ErrNothingToRollBack is Down on a database with no migration applied.
var ErrNothingToRollBack = errors.New("no migration is applied: nothing to roll back")

// ErrMigrationUnknown is Down by a binary that lacks a migration the
// database has (a newer release applied it), so it has no down section.
var ErrMigrationUnknown = errors.New("migration unknown to this binary")

// unknownMigration explains goose's "version not found" on a down.
func (r *Runner) unknownMigration(ctx context.Context, err error) error {
	if !errors.Is(err, goose.ErrVersionNotFound) {
		return err
	}
	v, verr := r.provider.GetDBVersion(ctx)
	if verr != nil {
		return errors.Join(err, verr)
	}
	return fmt.Errorf("%w: the database's newest migration, %05d, is not in this binary (a newer release applied it): "+
		"roll it back with that release's image", ErrMigrationUnknown, v)
}

// Down rolls back the most recent migration and returns its file name.
// Rolling back the baseline drops everything, the function set and its
// record included.
//
// The function bodies in place were written for the schema before the
// rollback, and this binary has no older ones: Down forgets the set's
// record (forgetFunctions), so the next binary to boot — the older one a
// rollback runs — applies its own set instead of leaving a "newer" one.
func (r *Runner) Down(ctx context.Context) (string, error) {
	var name string
	err := r.locked(ctx, func(ctx context.Context, conn *sql.Conn) error {
		err := r.retryLocked(ctx, "migrate down", func() error {
			res, err := r.provider.Down(ctx)
			switch {
			case errors.Is(err, goose.ErrNoNextVersion):
				return ErrNothingToRollBack
			case err != nil:
				return r.unknownMigration(ctx, err)
			}
			name = path.Base(res.Source.Path)
			return nil
		})
		if err != nil {
			return err
		}
		return r.forgetFunctions(ctx, conn)
	})
	return name, err
}

// DownTo rolls back every migration newer than version (0 = all), and
// forgets the function set's record as Down does.
func (r *Runner) DownTo(ctx context.Context, version int64) error {
	return r.locked(ctx, func(ctx context.Context, conn *sql.Conn) error {
		rolledBack := 0
		err := r.retryLocked(ctx, fmt.Sprintf("migrate down to %d", version), func() error {
			res, err := r.provider.DownTo(ctx, version)
			rolledBack += len(res)
			if pe := (*goose.PartialError)(nil); errors.As(err, &pe) {
				rolledBack += len(pe.Applied)
			}
			return r.unknownMigration(ctx, err)
		})
		if rolledBack == 0 {
			return err
		}
		return errors.Join(err, r.forgetFunctions(ctx, conn))
	})
}

// locked runs f holding the migration lock on a dedicated session, which
// does nothing else: f gets a connection of its own (goose takes another).
// That session sits idle while f works, and an idle session can go (a
// proxy's or the server's idle timeout, a pg_terminate_backend) and its lock
// with it, letting another run in: it is checked every LockCheck, and if it
// is gone f's context is cancelled and locked returns errLockLost.
func (r *Runner) locked(ctx context.Context, f func(context.Context, *sql.Conn) error) (err error) {
	lock, err := r.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("migration lock: connect: %w", err)
	}
	defer lock.Close()
	if err := waitLock(ctx, lock); err != nil {
		return err
	}
	defer func() {
		// A session lock must not outlive the run even if ctx is done; if the
		// unlock fails the session is discarded and the lock goes with it.
		if _, uerr := lock.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", LockID); uerr != nil {
			_ = lock.Raw(func(any) error { return driver.ErrBadConn })
			if err == nil {
				err = fmt.Errorf("migration unlock: %w", uerr)
			}
		}
	}()
	runCtx, cancel := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchLock(runCtx, lock, cancel)
	}()
	defer func() {
		cancel(nil)
		<-watched
	}()
	work, err := r.db.Conn(runCtx)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer work.Close()
	err = f(runCtx, work)
	if cause := context.Cause(runCtx); errors.Is(cause, errLockLost) {
		return errors.Join(cause, err)
	}
	return err
}

// errLockLost is a run stopped because its lock session went.
var errLockLost = errors.New("migration lock: its session is gone, and the lock with it; " +
	"stopped so that no other run migrates at the same time (the next run takes over)")

// watchLock checks lock's session every LockCheck until ctx ends, and
// cancels the run with errLockLost when it is gone.
func watchLock(ctx context.Context, lock *sql.Conn, cancel context.CancelCauseFunc) {
	t := time.NewTicker(LockCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := lock.PingContext(ctx); err != nil && ctx.Err() == nil {
			cancel(fmt.Errorf("%w: %w", errLockLost, err))
			return
		}
	}
}

// waitLock takes LockID on conn, asking every LockPoll for at most
// LockWait. Each ask is a statement of its own that returns at once, so a
// waiting run holds no transaction open (see the package comment).
func waitLock(ctx context.Context, conn *sql.Conn) error {
	deadline := time.Now().Add(LockWait)
	for {
		var held bool
		if err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", LockID).Scan(&held); err != nil {
			return fmt.Errorf("migration lock: %w", err)
		}
		if held {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("migration lock: another migrate run held it for more than %s", LockWait)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migration lock (waiting for another migrate run): %w", ctx.Err())
		case <-time.After(LockPoll):
		}
	}
}

// Version is the current schema version (0 = empty database).
func (r *Runner) Version(ctx context.Context) (int64, error) {
	v, err := r.provider.GetDBVersion(ctx)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// Status writes one line per known migration (version, state, file), then
// the function set's line: the version the database records and this
// binary's.
func (r *Runner) Status(ctx context.Context, w io.Writer) error {
	st, err := r.provider.Status(ctx)
	if err != nil {
		return fmt.Errorf("migration status: %w", err)
	}
	var known int64
	for _, s := range st {
		applied := "pending"
		if s.State == goose.StateApplied {
			applied = "applied " + s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		fmt.Fprintf(w, "%05d  %-30s  %s\n", s.Source.Version, applied, s.Source.Path)
		known = max(known, s.Source.Version)
	}
	// A newer release's migrations are not in this binary: say the database
	// has them, or "applied" above would read as "at this release".
	if v, err := r.Version(ctx); err != nil {
		return err
	} else if v > known {
		fmt.Fprintf(w, "%05d  %-30s  the database is at migration %d, newer than this binary's %05d (a newer release applied it)\n",
			v, "newer", v, known)
	}
	rec, err := r.FunctionSet(ctx)
	if err != nil {
		return err
	}
	state := "pending"
	switch {
	case rec.Version == 0:
	case rec.Version > r.functions.Version:
		state = "newer " + rec.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
	case rec.Version == r.functions.Version && rec.Checksum != r.functions.Checksum:
		state = "checksum mismatch"
	case rec.Version == r.functions.Version:
		state = "applied " + rec.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
	}
	fmt.Fprintf(w, "fn%03d  %-30s  db/functions (%d files, database at %d)\n",
		r.functions.Version, state, len(r.functions.Files), rec.Version)
	return nil
}

// Up is a convenience: open, apply everything pending, close.
func Up(ctx context.Context, databaseURL string) error {
	return UpFS(ctx, databaseURL, migrations.FS)
}

// UpFS is Up over another set of migration files (with the embedded
// function set).
func UpFS(ctx context.Context, databaseURL string, fsys fs.FS) error {
	r, err := OpenFS(databaseURL, fsys, nil)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = r.Up(ctx)
	return err
}
