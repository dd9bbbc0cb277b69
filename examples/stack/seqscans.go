package stack

import (
	"context"
	"fmt"
)

// SeqRowsRead is how many rows Seq Scans have read from the tables a fleet
// grows — resources, its phase and label rows, the edges, and the queue's
// and the outbox's partitions — since the cluster started: every hot
// statement probes those by key, so a plan that scans one of them shows
// here as millions of rows where a healthy run reads a handful (the
// catalog-sized tables beside them are left out: scanning those is the
// cheap plan). The counters are the server's cumulative statistics, which a
// busy backend flushes at most once a second and an idle one within ten
// seconds, so a read taken just after a run may miss its last seconds.
func (s *Stack) SeqRowsRead(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `
SELECT coalesce(sum(seq_tup_read), 0)::bigint
  FROM pg_stat_user_tables
 WHERE relname IN ('resources', 'resource_phases', 'resource_labels', 'resource_deps')
    OR relname ~ '^work_(queue|outbox)_p[0-9]+$'`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the tables' seq scan counters: %w", err)
	}
	return n, nil
}
