package maintenance

import (
	"context"

	"github.com/converge-run/converge/core/store/internal/dbx"
)

// SweepPrunedConfigs deletes the composer-owned providerconfigs kept after
// their composition stopped emitting them (while resources named them) that
// no resource names any more, oldest prune first, at most limit, each
// recorded on its root as a Normal ProviderConfigDeleted event
// (sweep_pruned_configs). Not sharded: every control pod runs it, and a
// config another pass holds is skipped. Returns how many it deleted.
func (s *Store) SweepPrunedConfigs(ctx context.Context, limit int) (int, error) {
	n, err := s.count(ctx, `SELECT sweep_pruned_configs($1)`, limit)
	if err != nil {
		return 0, dbx.Wrap(err, "sweep pruned providerconfigs")
	}
	return n, nil
}
