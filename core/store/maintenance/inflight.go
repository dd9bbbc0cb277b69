package maintenance

import (
	"context"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// RecountInflight rewrites the authoritative kind_inflight partial of r for
// every capped kind from the true number of leased tasks, erasing the drift
// of the claimers' optimistic hints. A no-op when no kind is capped. It
// returns the number of partials written.
func (s *Store) RecountInflight(ctx context.Context, r shard.Range) (int, error) {
	n, err := s.count(ctx, `SELECT recount_inflight($1, $2)`, r.Lo, r.Last())
	if err != nil {
		return 0, dbx.Wrap(err, "recount inflight (shards %s)", r)
	}
	return n, nil
}
