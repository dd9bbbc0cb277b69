package maintenance

import (
	"context"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// SweepDeletable advances the marked teardown trees in r bottom-up: every
// marked resource with no owned child and no dependent left gets its delete
// task enqueued (finalizers present) or is hard-deleted (finalizers empty),
// looping until a pass deletes nothing, at most limit rows. It returns the
// number of resources advanced.
func (s *Store) SweepDeletable(ctx context.Context, r shard.Range, limit int) (int, error) {
	n, err := s.count(ctx,
		`SELECT sweep_deletable($1, $2, $3, coalesce($4::timestamptz, now()))`,
		r.Lo, r.Last(), limit, s.nowArg())
	if err != nil {
		return 0, dbx.Wrap(err, "sweep deletable (shards %s)", r)
	}
	return n, nil
}

// SweepExpiredOrphans tears down up to limit composer-dropped resources in r
// whose orphan grace elapsed: finalizer kinds through the soft-delete
// protocol, leaf kinds by hard delete. Quarantined resources are never
// touched. It returns the number of orphans escalated.
func (s *Store) SweepExpiredOrphans(ctx context.Context, r shard.Range, limit int) (int, error) {
	n, err := s.count(ctx,
		`SELECT sweep_expired_orphans($1, $2, $3, coalesce($4::timestamptz, now()))`,
		r.Lo, r.Last(), limit, s.nowArg())
	if err != nil {
		return 0, dbx.Wrap(err, "sweep expired orphans (shards %s)", r)
	}
	return n, nil
}
