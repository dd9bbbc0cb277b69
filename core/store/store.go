// Package store is all SQL access of the control plane: kind manifests and
// their live config, resources (apply, get, list, phase counts, conditions,
// events), provider configs, reactor bindings and the operator actions that
// the plpgsql functions carry out.
//
// Driver errors are mapped once, here: callers see ErrNotFound, ErrConflict
// and ErrInvalid (*InvalidError) and never a pgconn error code. Writes that
// the caller reads back go to the primary; list, count and get reads that
// serve the API go to the read pool (a streaming replica when configured).
package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store is the control plane's data access. It is safe for concurrent use.
type Store struct {
	primary *pgxpool.Pool
	read    *pgxpool.Pool
	kinds   *kindCache
}

// New returns a store over the primary pool and an optional read pool (a
// streaming replica); read nil reads from the primary.
func New(primary, read *pgxpool.Pool) *Store {
	if read == nil {
		read = primary
	}
	return &Store{primary: primary, read: read, kinds: newKindCache()}
}

// querier is what a pool and a transaction have in common.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// inTx runs fn in a transaction on the primary, committing when fn returns
// nil and rolling back otherwise: nothing is written when anything fails.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.primary.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return mapErr(err, "commit")
	}
	return nil
}
