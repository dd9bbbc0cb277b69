package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The function set's record: one row per version ever applied. It only
// moves forward; the newest row is what the database runs.
const createFunctionSetTable = `CREATE TABLE IF NOT EXISTS converge_function_set (
    version    bigint      PRIMARY KEY,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// FunctionsAction is what Up did with this binary's function set.
type FunctionsAction string

const (
	// FunctionsApplied means the database had no set or an older one; this
	// binary's set is now applied and recorded.
	FunctionsApplied FunctionsAction = "applied"
	// FunctionsUnchanged means the database already runs this exact set.
	FunctionsUnchanged FunctionsAction = "unchanged"
	// FunctionsNewerPresent means the database runs a newer set (a newer binary
	// migrated it, e.g. mid rolling update); it was left alone.
	FunctionsNewerPresent FunctionsAction = "newer-present"
)

// FunctionsReport says what became of the function set.
type FunctionsReport struct {
	Action FunctionsAction
	// Embedded is this binary's set version.
	Embedded int64
	// Recorded is the version the database runs after Up.
	Recorded int64
}

// ErrFunctionSetConflict means the database records this binary's function set
// version with another checksum. Two builds disagree about what one version
// holds — a function file changed without a new line in db/functions/VERSION
// (which TestLedger_MatchesFiles catches before it ships). Neither set can be
// trusted to be the newer, so Up refuses rather than guess.
var ErrFunctionSetConflict = errors.New("function set conflict")

// FunctionSetRecord is the function set a database records.
type FunctionSetRecord struct {
	Version   int64 // 0: none recorded
	Checksum  string
	AppliedAt time.Time
}

// FunctionSet reads the function set the database records (zero if none).
func (r *Runner) FunctionSet(ctx context.Context) (FunctionSetRecord, error) {
	var rec FunctionSetRecord
	var exists bool
	if err := r.db.QueryRowContext(ctx, `SELECT to_regclass('converge_function_set') IS NOT NULL`).Scan(&exists); err != nil {
		return rec, fmt.Errorf("read function set record: %w", err)
	}
	if !exists {
		return rec, nil
	}
	err := r.db.QueryRowContext(ctx,
		`SELECT version, checksum, applied_at FROM converge_function_set ORDER BY version DESC LIMIT 1`).
		Scan(&rec.Version, &rec.Checksum, &rec.AppliedAt)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return rec, fmt.Errorf("read function set record: %w", err)
	}
	return rec, nil
}

// functionsPlan is what the first step of Up decided about the set.
type functionsPlan struct {
	rep FunctionsReport
	// apply: the set is newer than the database's and is to be applied
	// after the DDL; created holds the files the first step already applied.
	apply   bool
	created map[string]bool
}

// The function set is applied in two steps around the versioned DDL, on
// conn (which holds the migration lock), each in one transaction with
// check_function_bodies off — on a fresh database the tables a SQL-language
// body reads do not exist yet (plpgsql binds names when it runs anyway), and
// files apply in plain name order. The post-migrate test re-creates every
// function with the check on, against the full schema.
//
//  1. prepareFunctions, before the DDL: the functions the database does not
//     have yet (each file is named for its function). The DDL may name them
//     (a trigger, a CHECK, a generated column), and nothing calls them yet.
//     On a fresh database this is the whole set.
//  2. finishFunctions, after the DDL: every other body, and the record.
//
// A changed body so replaces the old one only once the schema it was
// written for is in place: while a migration waits for its table (the lock
// timeout and its retries), or after one failed, the database runs the
// bodies that match its schema, not new ones reading columns that do not
// exist yet.

// prepareFunctions reads the record and, when this binary's set is newer
// (or none is recorded), creates the functions the database lacks.
func (r *Runner) prepareFunctions(ctx context.Context, conn *sql.Conn) (functionsPlan, error) {
	set := r.functions
	plan := functionsPlan{rep: FunctionsReport{Embedded: set.Version}, created: map[string]bool{}}
	err := r.functionsTx(ctx, conn, func(tx *sql.Tx) error {
		recV, recSum, err := readFunctionSetRecord(ctx, tx)
		if err != nil {
			return err
		}
		plan.rep.Recorded = recV
		switch {
		case recV > set.Version:
			plan.rep.Action = FunctionsNewerPresent
			return nil
		case recV == set.Version && recSum == set.Checksum:
			plan.rep.Action = FunctionsUnchanged
			return nil
		case recV == set.Version:
			return fmt.Errorf("%w: the database runs function set %d with checksum %s, this binary's set %d has %s "+
				"(a function changed without a new line in db/functions/VERSION)",
				ErrFunctionSetConflict, recV, recSum, set.Version, set.Checksum)
		}
		plan.apply = true
		for _, f := range set.Files {
			name := strings.TrimSuffix(f.Name, ".sql")
			var exists bool
			if err := tx.QueryRowContext(ctx,
				`SELECT EXISTS (SELECT FROM pg_proc WHERE proname = $1 AND pronamespace = current_schema()::regnamespace)`,
				name).Scan(&exists); err != nil {
				return fmt.Errorf("function set %d: look up %s: %w", set.Version, name, err)
			}
			if exists {
				continue
			}
			if _, err := tx.ExecContext(ctx, f.SQL); err != nil {
				return fmt.Errorf("function set %d: apply %s: %w", set.Version, f.Name, err)
			}
			plan.created[f.Name] = true
		}
		return nil
	})
	return plan, err
}

// finishFunctions applies the bodies prepareFunctions left and records the
// set.
func (r *Runner) finishFunctions(ctx context.Context, conn *sql.Conn, plan functionsPlan) (FunctionsReport, error) {
	set := r.functions
	rep := plan.rep
	if !plan.apply {
		return rep, nil
	}
	err := r.functionsTx(ctx, conn, func(tx *sql.Tx) error {
		for _, f := range set.Files {
			if plan.created[f.Name] {
				continue
			}
			if _, err := tx.ExecContext(ctx, f.SQL); err != nil {
				return fmt.Errorf("function set %d: apply %s: %w", set.Version, f.Name, err)
			}
		}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO converge_function_set (version, checksum) VALUES ($1, $2)`, set.Version, set.Checksum); err != nil {
			return fmt.Errorf("function set: record: %w", err)
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	rep.Action, rep.Recorded = FunctionsApplied, set.Version
	return rep, nil
}

// functionsTx runs f in a transaction on conn with check_function_bodies off
// and the record table created and locked.
func (r *Runner) functionsTx(ctx context.Context, conn *sql.Conn, f func(*sql.Tx) error) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("function set: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, createFunctionSetTable); err != nil {
		return fmt.Errorf("function set: create record table: %w", err)
	}
	// The advisory lock already serialises runners; the table lock keeps the
	// record honest against anything else writing it.
	if _, err := tx.ExecContext(ctx, `LOCK TABLE converge_function_set IN EXCLUSIVE MODE`); err != nil {
		return fmt.Errorf("function set: lock record: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `SET LOCAL check_function_bodies = off`); err != nil {
		return fmt.Errorf("function set: %w", err)
	}
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("function set %d: commit: %w", r.functions.Version, err)
	}
	return nil
}

// forgetFunctions deletes the function set's record (when the table is
// still there), so the next Up of any binary applies its own set.
func (r *Runner) forgetFunctions(ctx context.Context, conn *sql.Conn) error {
	if _, err := conn.ExecContext(ctx, `DO $$ BEGIN
	    IF to_regclass('converge_function_set') IS NOT NULL THEN DELETE FROM converge_function_set; END IF;
	END $$`); err != nil {
		return fmt.Errorf("function set: forget the record after rolling back: %w", err)
	}
	return nil
}

// readFunctionSetRecord reads the newest recorded version (0 if none).
func readFunctionSetRecord(ctx context.Context, tx *sql.Tx) (int64, string, error) {
	var v int64
	var sum string
	err := tx.QueryRowContext(ctx,
		`SELECT version, checksum FROM converge_function_set ORDER BY version DESC LIMIT 1`).Scan(&v, &sum)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return 0, "", fmt.Errorf("function set: read record: %w", err)
	}
	return v, sum, nil
}
