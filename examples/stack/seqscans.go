package stack

import (
	"context"
	"fmt"
)

// SeqRows is how many rows Seq Scans have read since the cluster started,
// from the tables a fleet grows and from the outbox, apart.
type SeqRows struct {
	// Fleet: resources, its phase and label rows, the edges and the
	// queue's partitions. Every hot statement probes those by key, so a
	// plan that scans one of them shows here as millions of rows where a
	// healthy run reads a handful.
	Fleet int64
	// Outbox: the outbox's partitions. They hold the results not yet
	// drained, a backlog the claims' pacing bounds, and the drain's pop
	// takes every row of a partition of a few pages by a scan when that is
	// the cheap plan (planned per call): a 1M run reads about half a row a
	// leaf here, some 70 rows a scan, as the pops it is made of.
	Outbox int64
}

// Sub is the rows read between an earlier reading b and s.
func (s SeqRows) Sub(b SeqRows) SeqRows {
	return SeqRows{Fleet: s.Fleet - b.Fleet, Outbox: s.Outbox - b.Outbox}
}

// SeqRowsRead reads the Seq Scan counters of the fleet's tables and the
// outbox (the catalog-sized tables beside them are left out: scanning those
// is the cheap plan). The counters are the server's cumulative statistics,
// which a busy backend flushes at most once a second and an idle one within
// ten seconds, so a read taken just after a run may miss its last seconds.
func (s *Stack) SeqRowsRead(ctx context.Context) (SeqRows, error) {
	var n SeqRows
	err := s.pool.QueryRow(ctx, `
SELECT coalesce(sum(seq_tup_read) FILTER (WHERE relname !~ '^work_outbox_p'), 0)::bigint,
       coalesce(sum(seq_tup_read) FILTER (WHERE relname ~ '^work_outbox_p'), 0)::bigint
  FROM pg_stat_user_tables
 WHERE relname IN ('resources', 'resource_phases', 'resource_labels', 'resource_deps')
    OR relname ~ '^work_(queue|outbox)_p[0-9]+$'`).Scan(&n.Fleet, &n.Outbox)
	if err != nil {
		return SeqRows{}, fmt.Errorf("read the tables' seq scan counters: %w", err)
	}
	return n, nil
}

// BuffersTouched is how many buffers the database's backends have read
// since the cluster started — found in shared buffers or read in
// (pg_stat_database's blks_hit + blks_read) — flushed as the Seq Scan
// counters are. Over a window, divided by its rows, it is a trap's other
// signature: a plan that probes an index by the wrong columns reads no row
// by a Seq Scan and yet hundreds of pages a row.
func (s *Stack) BuffersTouched(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT (blks_hit + blks_read)::bigint FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("read the database's buffer counters: %w", err)
	}
	return n, nil
}
