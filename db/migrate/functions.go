package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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

// applyFunctions applies the function set on conn (which holds the migration
// lock) in one transaction, when the recorded set is older or absent.
//
// check_function_bodies is off for the transaction: the set is applied
// before the versioned DDL, so on a fresh database the tables a SQL-language
// body reads do not exist yet (plpgsql binds names when it runs anyway), and
// files then apply in plain name order. The post-migrate test re-creates
// every function with the check on, against the full schema.
func (r *Runner) applyFunctions(ctx context.Context, conn *sql.Conn) (FunctionsReport, error) {
	set := r.functions
	rep := FunctionsReport{Embedded: set.Version}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return rep, fmt.Errorf("function set: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, createFunctionSetTable); err != nil {
		return rep, fmt.Errorf("function set: create record table: %w", err)
	}
	// The advisory lock already serialises runners; the table lock keeps the
	// record honest against anything else writing it.
	if _, err := tx.ExecContext(ctx, `LOCK TABLE converge_function_set IN EXCLUSIVE MODE`); err != nil {
		return rep, fmt.Errorf("function set: lock record: %w", err)
	}
	var recV int64
	var recSum string
	err = tx.QueryRowContext(ctx,
		`SELECT version, checksum FROM converge_function_set ORDER BY version DESC LIMIT 1`).Scan(&recV, &recSum)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return rep, fmt.Errorf("function set: read record: %w", err)
	}
	rep.Recorded = recV
	switch {
	case recV > set.Version:
		rep.Action = FunctionsNewerPresent
		return rep, nil
	case recV == set.Version && recSum == set.Checksum:
		rep.Action = FunctionsUnchanged
		return rep, nil
	case recV == set.Version:
		return rep, fmt.Errorf("%w: the database runs function set %d with checksum %s, this binary's set %d has %s "+
			"(a function changed without a new line in db/functions/VERSION)",
			ErrFunctionSetConflict, recV, recSum, set.Version, set.Checksum)
	}
	if _, err := tx.ExecContext(ctx, `SET LOCAL check_function_bodies = off`); err != nil {
		return rep, fmt.Errorf("function set: %w", err)
	}
	for _, f := range set.Files {
		if _, err := tx.ExecContext(ctx, f.SQL); err != nil {
			return rep, fmt.Errorf("function set %d: apply %s: %w", set.Version, f.Name, err)
		}
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO converge_function_set (version, checksum) VALUES ($1, $2)`, set.Version, set.Checksum); err != nil {
		return rep, fmt.Errorf("function set: record: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return rep, fmt.Errorf("function set %d: commit: %w", set.Version, err)
	}
	rep.Action, rep.Recorded = FunctionsApplied, set.Version
	return rep, nil
}
