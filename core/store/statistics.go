package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// UndersizedMinRows is the fewest live rows a fleet table holds before the
// statistics guard looks at its statistics: below it a plan that reads the
// table whole reads little.
const UndersizedMinRows = 10000

// AnalyzeUndersized re-analyzes each of the fleet's tables whose statistics
// size it at under a tenth of its live rows once it holds minRows or more
// (analyze_undersized: a table analyzed while empty after a teardown, then
// filled by the next fleet) and returns their names. None when every
// table's statistics are near its size, or while another member runs it;
// a table another session holds a conflicting lock on (autovacuum's pass)
// is left for a later call, never waited for.
func (s *Store) AnalyzeUndersized(ctx context.Context, minRows int64) ([]string, error) {
	var tables []string
	if err := s.primary.QueryRow(ctx, `SELECT analyze_undersized($1)`, minRows).Scan(&tables); err != nil {
		return nil, mapErr(err, "analyze the fleet's undersized tables")
	}
	return tables, nil
}

// fleetTables are the tables that grow and shrink with the fleet, whose
// statistics a teardown's wake can leave sized at zero rows.
var fleetTables = []string{"resources", "resource_phases", "resource_labels", "resource_deps"}

// AnalyzeFleetTables analyzes the fleet's tables (resources,
// resource_phases, resource_labels, resource_deps) now, as an operator's
// ANALYZE in a teardown's wake does, and returns those it left sized at
// zero rows over pages that still hold rows (every row dead, the pages not
// yet truncated): the statistics AnalyzeUndersized is there to correct. The
// benchmark's -again window measures a fleet applied against them; converge
// itself never calls it.
func (s *Store) AnalyzeFleetTables(ctx context.Context) ([]string, error) {
	for _, t := range fleetTables {
		if _, err := s.primary.Exec(ctx, `ANALYZE `+pgx.Identifier{t}.Sanitize()); err != nil {
			return nil, mapErr(err, "analyze "+t)
		}
	}
	var zero []string
	err := s.primary.QueryRow(ctx, `
SELECT coalesce(array_agg(t.name ORDER BY t.name), '{}')
  FROM unnest($1::text[]) AS t(name)
  JOIN pg_class c ON c.oid = to_regclass(t.name)
 WHERE c.reltuples = 0 AND c.relpages > 0`, fleetTables).Scan(&zero)
	if err != nil {
		return nil, mapErr(err, "read the fleet tables' statistics")
	}
	return zero, nil
}
