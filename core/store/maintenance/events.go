package maintenance

import (
	"context"
	"time"

	"github.com/converge-run/converge/core/store/internal/dbx"
)

// PruneEvents deletes the oldest events created before the cutoff
// (before), at most limit, and returns how many it deleted. It walks the log
// in time order (idx_resource_events_created), so a pass reads the rows it
// deletes, and with nothing expired it is one probe of that index, however
// many events there are.
//
// Control pods run it concurrently: a row another pass is deleting is
// waited for and then skipped, so two passes never delete one row twice or
// fail on it.
func (s *Store) PruneEvents(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := s.count(ctx, `
WITH gone AS (
    DELETE FROM resource_events e
     WHERE e.id = ANY (ARRAY(
             SELECT x.id FROM resource_events x
              WHERE x.created_at < $1
              ORDER BY x.created_at
              LIMIT $2))
    RETURNING 1
)
SELECT count(*)::int FROM gone`, before, limit)
	return n, dbx.Wrap(err, "prune resource events before %s", before.Format(time.RFC3339))
}
