package dbx

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// ByKeyOnlySQL turns seq scans off for the rest of a transaction, for a
// write that reaches every row it touches by key (an apply, an operator
// verb, a compose: their rows, events, history, phase rows and the foreign
// keys' checks). A session keeps some plans past the tables' growth — each
// foreign key's check plan, and a statement's generic plan once five calls
// cost no less than it — and a plan made while the tables were small (a
// fresh install's first writes) is a Seq Scan, which it would keep while a
// bulk apply grows them, until an ANALYZE replaces it
// (TestPlans_APISessionPlannedOnEmptyTables,
// TestPlans_BrokerSessionPlannedOnEmptyTables).
const ByKeyOnlySQL = `SET LOCAL enable_seqscan = off`

// ByKeyOnly runs ByKeyOnlySQL in tx.
func ByKeyOnly(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, ByKeyOnlySQL); err != nil {
		return Wrap(err, "set enable_seqscan")
	}
	return nil
}
