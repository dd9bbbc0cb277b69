package maintenance

import (
	"context"
	"fmt"
)

// SweepDeletable advances the marked teardown trees in r bottom-up: every
// marked resource with no owned child and no dependent left gets its delete
// task enqueued (finalizers present) or is hard-deleted (finalizers empty),
// looping until a pass deletes nothing, at most max rows. It returns the
// number of resources advanced.
func (s *Store) SweepDeletable(ctx context.Context, r ShardRange, max int) (int, error) {
	n, err := s.count(ctx,
		`SELECT sweep_deletable($1, $2, $3, coalesce($4::timestamptz, now()))`,
		r.Lo, r.Hi, max, s.nowArg())
	if err != nil {
		return 0, fmt.Errorf("sweep deletable (shards %s): %w", r, err)
	}
	return n, nil
}

// SweepExpiredOrphans tears down up to max composer-dropped resources in r
// whose orphan grace elapsed: finalizer kinds through the soft-delete
// protocol, leaf kinds by hard delete. Quarantined resources are never
// touched. It returns the number of orphans escalated.
func (s *Store) SweepExpiredOrphans(ctx context.Context, r ShardRange, max int) (int, error) {
	n, err := s.count(ctx,
		`SELECT sweep_expired_orphans($1, $2, $3, coalesce($4::timestamptz, now()))`,
		r.Lo, r.Hi, max, s.nowArg())
	if err != nil {
		return 0, fmt.Errorf("sweep expired orphans (shards %s): %w", r, err)
	}
	return n, nil
}
