package store

import "context"

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
