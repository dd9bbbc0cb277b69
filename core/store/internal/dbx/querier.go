// Package dbx is what every store sub-package shares: the querier interface a
// pool, a connection and a transaction have in common, the transaction
// helper, and the one mapper that classifies driver errors into the store's
// sentinels (ErrNotFound, ErrConflict, ErrInvalid) at the store boundary, so
// nothing above the store sees a pgconn error code.
package dbx

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Querier is what a pgx pool, connection and transaction have in common.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Beginner starts transactions (a pool or a connection).
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// InTx runs fn in a transaction on db, committing when fn returns nil and
// rolling back otherwise: nothing is written when anything fails. A failed
// commit is mapped (a serialization failure surfaces as ErrConflict).
func InTx(ctx context.Context, db Beginner, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return MapErr(err, "commit")
	}
	return nil
}
