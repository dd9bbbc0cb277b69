package store

import (
	"context"
	"fmt"
	"math"
)

// QueueDepthOther is the kind label of queue rows the statistics cannot
// attribute to a kind (a partition analysed before its kinds were sampled,
// or a kind too rare for the most-common-values list).
const QueueDepthOther = "(other)"

// QueueDepth estimates the work_queue rows by kind and state (pending,
// leased) for the converge_queue_depth gauge from planner statistics only:
// it reads the catalog, never the queue, so it costs O(partitions × kinds)
// however deep the queue is.
//
// Per partition, the row counts of the partial indexes idx_work_queue_pending
// (worker_id IS NULL) and idx_work_queue_leased (worker_id IS NOT NULL) are
// split over kinds by the partition's sampled kind frequencies
// (pg_stats.most_common_freqs). The figures are as fresh as each partition's
// last (auto)vacuum or analyze, and the split assumes the pending and leased
// rows of a partition share its kind mix; rows no frequency covers are
// reported under QueueDepthOther.
func (s *Store) QueueDepth(ctx context.Context) (map[[2]string]float64, error) {
	rows, err := s.primary.Query(ctx, `
WITH state AS (
    SELECT ix.indrelid AS part, CASE i.inhparent WHEN 'idx_work_queue_pending'::regclass THEN 'pending' ELSE 'leased' END AS state,
           greatest(c.reltuples, 0)::float8 AS n
      FROM pg_inherits i
      JOIN pg_class c ON c.oid = i.inhrelid
      JOIN pg_index ix ON ix.indexrelid = i.inhrelid
     WHERE i.inhparent IN ('idx_work_queue_pending'::regclass, 'idx_work_queue_leased'::regclass)
), mix AS (
    SELECT format('%I.%I', st.schemaname, st.tablename)::regclass AS part, v.kind, v.freq::float8 AS freq
      FROM pg_stats st
     CROSS JOIN LATERAL unnest(st.most_common_vals::text::text[], st.most_common_freqs) AS v(kind, freq)
     WHERE st.attname = 'kind' AND NOT st.inherited
       AND format('%I.%I', st.schemaname, st.tablename)::regclass IN (SELECT part FROM state)
), covered AS (
    SELECT part, sum(freq) AS freq FROM mix GROUP BY part
)
SELECT m.kind, s.state, sum(s.n * m.freq)
  FROM state s JOIN mix m ON m.part = s.part
 GROUP BY 1, 2
UNION ALL
SELECT $1, s.state, sum(s.n * greatest(0, 1 - coalesce(c.freq, 0)))
  FROM state s LEFT JOIN covered c ON c.part = s.part
 GROUP BY 2`, QueueDepthOther)
	if err != nil {
		return nil, fmt.Errorf("read queue depth: %w", err)
	}
	defer rows.Close()
	out := map[[2]string]float64{}
	for rows.Next() {
		var kind, state string
		var n float64
		if err := rows.Scan(&kind, &state, &n); err != nil {
			return nil, fmt.Errorf("read queue depth: %w", err)
		}
		if n = math.Round(n); n > 0 || kind != QueueDepthOther {
			out[[2]string{kind, state}] = n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read queue depth: %w", err)
	}
	return out, nil
}
