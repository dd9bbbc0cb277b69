package store

import (
	"context"

	"github.com/converge-run/converge/core/resource"
)

const phaseCountsSQL = `
SELECT phase, sum(n)::bigint FROM (
	SELECT phase, n FROM resource_phase_counts WHERE $1 = '' OR kind = $1
	UNION ALL
	SELECT phase, dn FROM resource_phase_deltas WHERE $1 = '' OR kind = $1
) t
GROUP BY phase`

// PhaseCounts returns the number of resources in each of the seven phases
// (in precedence order, zeros included) for one kind, or all kinds when kind
// is "". It never counts resources: it reads the folded totals
// (resource_phase_counts) plus the pending deltas the resources' statement
// triggers appended since the last fold, so its cost is the number of
// (kind, phase) pairs plus the pending deltas, independent of the table's
// size.
func (s *Store) PhaseCounts(ctx context.Context, kind string) ([]resource.PhaseCount, error) {
	rows, err := s.read.Query(ctx, phaseCountsSQL, kind)
	if err != nil {
		return nil, mapErr(err, "phase counts")
	}
	defer rows.Close()
	byPhase := map[resource.Phase]int64{}
	for rows.Next() {
		var phase string
		var n int64
		if err := rows.Scan(&phase, &n); err != nil {
			return nil, mapErr(err, "phase counts")
		}
		byPhase[resource.Phase(phase)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "phase counts")
	}
	out := make([]resource.PhaseCount, len(resource.AllPhases))
	for i, p := range resource.AllPhases {
		out[i] = resource.PhaseCount{Phase: p, Count: byPhase[p]}
	}
	return out, nil
}

// FoldPhaseCounts folds the pending phase-count deltas into the totals
// (fold_phase_count_deltas, in batches) and returns how many deltas it
// folded; 0 when there were none or another folder holds the lock. The
// control plane calls it periodically; reads are exact with or without it.
func (s *Store) FoldPhaseCounts(ctx context.Context) (int, error) {
	const batch = 100000
	total := 0
	for {
		var n int
		if err := s.primary.QueryRow(ctx, `SELECT fold_phase_count_deltas($1)`, batch).Scan(&n); err != nil {
			return total, mapErr(err, "fold phase counts")
		}
		total += n
		if n < batch {
			return total, nil
		}
	}
}

// PhaseCountsByKind returns the phase counts of every kind in one statement
// (the hub recomputes the counts of all its subscribers' kinds at once):
// kind → phase → count, only non-zero entries.
func (s *Store) PhaseCountsByKind(ctx context.Context) (map[string]map[resource.Phase]int64, error) {
	rows, err := s.read.Query(ctx, `
SELECT kind, phase, sum(n)::bigint FROM (
	SELECT kind, phase, n FROM resource_phase_counts
	UNION ALL
	SELECT kind, phase, dn FROM resource_phase_deltas
) t
GROUP BY kind, phase
HAVING sum(n) <> 0`)
	if err != nil {
		return nil, mapErr(err, "phase counts by kind")
	}
	defer rows.Close()
	out := map[string]map[resource.Phase]int64{}
	for rows.Next() {
		var kind, phase string
		var n int64
		if err := rows.Scan(&kind, &phase, &n); err != nil {
			return nil, mapErr(err, "phase counts by kind")
		}
		if out[kind] == nil {
			out[kind] = map[resource.Phase]int64{}
		}
		out[kind][resource.Phase(phase)] = n
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "phase counts by kind")
	}
	return out, nil
}
