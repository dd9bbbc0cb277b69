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

// InByKeyTx is InTx whose statements reach rows by key only (ByKeyOnly):
// for the statements that join a batch of keys to a table, or call a
// function, whose plans a session would otherwise keep as Seq Scans.
func InByKeyTx(ctx context.Context, db Beginner, fn func(tx pgx.Tx) error) error {
	return InTx(ctx, db, func(tx pgx.Tx) error {
		if err := ByKeyOnly(ctx, tx); err != nil {
			return err
		}
		return fn(tx)
	})
}

// byKeyBatchSQL is ByKeyOnlySQL for a batch: a batch's statements run in one
// implicit transaction (one Sync), so a setting local to it lasts for the
// batch's statements and no longer.
const byKeyBatchSQL = `SELECT set_config('enable_seqscan', 'off', true)`

// ByKeyBatch returns a batch whose statements reach rows by key only (see
// ByKeyOnlySQL): the API's dataloader batches are cached statements of a
// read pool, whose generic plans, made on a fresh install's small tables,
// scanned them on every later call (TestPlans_APISessionPlannedOnEmptyTables).
// Send it with SendByKey.
func ByKeyBatch() *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(byKeyBatchSQL)
	return b
}

// BatchSender sends batches (a pool, a connection or a transaction).
type BatchSender interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// SendByKey sends b, made by ByKeyBatch, and reads the setting's result:
// the results returned are those of the statements queued after it.
func SendByKey(ctx context.Context, q BatchSender, b *pgx.Batch) (pgx.BatchResults, error) {
	br := q.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, Wrap(err, "set enable_seqscan")
	}
	return br, nil
}
