package store

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/core/store/internal/dbx"
)

type dryRunKey struct{}

// WithDryRun marks ctx as a dry run: every store write under it runs its
// whole transaction — each check, trigger and constraint a real write meets,
// so the same errors — and then rolls it back. Nothing is written and no
// NOTIFY is sent (Postgres delivers them only on commit); sequences may
// advance. The write returns what it would have returned.
func WithDryRun(ctx context.Context) context.Context {
	return context.WithValue(ctx, dryRunKey{}, true)
}

func isDryRun(ctx context.Context) bool {
	v, _ := ctx.Value(dryRunKey{}).(bool)
	return v
}

// errDryRun rolls a dry run's transaction back once fn has succeeded.
var errDryRun = errors.New("dry run")

func dryRunTx(ctx context.Context, db *pgxpool.Pool, fn func(tx pgx.Tx) error) error {
	err := dbx.InTx(ctx, db, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errDryRun
	})
	if errors.Is(err, errDryRun) {
		return nil
	}
	return err
}

// DryRunManifest is ApplyManifest as a dry run: the manifest is validated and
// upserted in a transaction that is rolled back. It decodes through a
// private kind cache, so the would-be manifest generation never reaches the
// store's shared one.
func (s *Store) DryRunManifest(ctx context.Context, raw []byte) (Kind, ApplyOutcome, error) {
	return s.DryRunManifestWith(ctx, raw, ManifestApplyOptions{})
}

// DryRunManifestWith is DryRunManifest with the owner's options (a dry
// run of a breaking change reports the stability gate's refusal, or passes
// with AcceptBreaking, exactly as the apply would).
func (s *Store) DryRunManifestWith(ctx context.Context, raw []byte, opts ManifestApplyOptions) (Kind, ApplyOutcome, error) {
	c := *s
	c.kinds = newKindCache()
	return c.ApplyManifestWith(WithDryRun(ctx), raw, opts)
}
