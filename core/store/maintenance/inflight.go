package maintenance

import (
	"context"
	"fmt"
)

// RecountInflight rewrites the authoritative kind_inflight partial of r for
// every capped kind from the true number of leased tasks, erasing the drift
// of the claimers' optimistic hints. A no-op when no kind is capped. It
// returns the number of partials written.
func (s *Store) RecountInflight(ctx context.Context, r ShardRange) (int, error) {
	n, err := s.count(ctx, `SELECT recount_inflight($1, $2)`, r.Lo, r.Hi)
	if err != nil {
		return 0, fmt.Errorf("recount inflight (shards %s): %w", r, err)
	}
	return n, nil
}
