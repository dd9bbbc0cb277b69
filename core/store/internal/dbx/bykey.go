package dbx

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// ByKeyOnlySQL turns seq scans off for the rest of a transaction, for a
// write that reaches every row it touches by key (an apply, an operator
// verb, a compose: their rows, events, history, phase rows and the foreign
// keys' checks). Our statements are planned per call (pgpool.ExecMode), but
// a session still keeps the plans made below them — each foreign key's
// check plan, and a trigger's or function's plpgsql statements — and one
// made while the tables were small (a fresh install's first writes) is a
// Seq Scan, which it would keep while a bulk apply grows them, until an
// ANALYZE replaces it (TestPlans_APISessionPlannedOnEmptyTables,
// TestPlans_BrokerSessionPlannedOnEmptyTables).
const ByKeyOnlySQL = `SET LOCAL enable_seqscan = off`

// ByKeyOnly runs ByKeyOnlySQL in tx.
func ByKeyOnly(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, ByKeyOnlySQL); err != nil {
		return Wrap(err, "set enable_seqscan")
	}
	return nil
}

// InByKeyTx is InTx whose statements reach rows by key only (ByKeyOnly):
// for statements that join a batch of keys to a table, which even a custom
// plan may hash over Seq Scans of every partition while the backlog is
// small.
func InByKeyTx(ctx context.Context, db Beginner, fn func(tx pgx.Tx) error) error {
	return InTx(ctx, db, func(tx pgx.Tx) error {
		if err := ByKeyOnly(ctx, tx); err != nil {
			return err
		}
		return fn(tx)
	})
}
