// Package store is all SQL access of the control plane: kind manifests and
// their live config, resources (apply, get, list, phase counts, conditions,
// events), provider configs, reactor bindings and the operator actions that
// the plpgsql functions carry out.
//
// Driver errors are mapped once, at the store boundary, by one mapper that
// this package and its sub-packages (pipeline, maintenance, membership,
// lifecycle) share (internal/dbx, with the one querier interface): callers
// see ErrNotFound, ErrConflict and ErrInvalid (*InvalidError) and never a
// pgconn error code. Compiled kind schemas live in one cache
// (internal/schemacache); shard ranges are core/shard's Range. Writes that
// the caller reads back go to the primary; list, count and get reads that
// serve the API go to the read pool (a streaming replica when configured).
package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/core/store/internal/dbx"
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
type querier = dbx.Querier

// inTx runs fn in a transaction on the primary, committing when fn returns
// nil and rolling back otherwise: nothing is written when anything fails.
// Under a dry run (WithDryRun) a successful fn is rolled back too.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	if isDryRun(ctx) {
		return dryRunTx(ctx, s.primary, fn)
	}
	return dbx.InTx(ctx, s.primary, fn)
}

// PrimaryReads returns a view of the store whose reads go to the primary:
// the read-your-writes path (a mutation's nested fields, a hub re-read that
// must not trail the NOTIFY it follows). It shares the kind cache.
func (s *Store) PrimaryReads() *Store {
	c := *s
	c.read = s.primary
	return &c
}
