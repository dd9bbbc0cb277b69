// Package lifecycle is the store side of reactor delivery: claiming
// lifecycle_outbox rows (one per transition edge × matching binding) for the
// reactor kinds a broker's workers serve, heartbeating the claims of slow
// reactors, and acknowledging a delivery once its reactor succeeded (or
// failed terminally: the broker drops it). A reactor that fails transiently
// is simply not acknowledged: its heartbeat stops, and reap_stale_lifecycle
// re-arms the row (at-least-once, per binding).
package lifecycle

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/core/store/internal/dbx"
)

// Key is a lifecycle_outbox row's primary key.
type Key struct {
	ResourceID uuid.UUID
	Transition string
	Generation int64
	Binding    string
	ShardID    int
}

// DedupToken is stable across redeliveries of this edge to this binding.
func (k Key) DedupToken() string {
	return fmt.Sprintf("%s:%s:%d:%s", k.ResourceID, k.Transition, k.Generation, k.Binding)
}

// Delivery is one claimed transition to deliver to a reactor.
type Delivery struct {
	Key        Key
	Reactor    string
	WatchKind  string
	ClaimEpoch int64
	Attempts   int
	// Snapshot is the watched resource's row as it was at the transition.
	Snapshot json.RawMessage
	Created  time.Time
}

// Store claims and acknowledges deliveries.
type Store struct{ pool *pgxpool.Pool }

// New returns a Store on the primary pool.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// Claim leases up to limit pending deliveries for the reactor kinds in shards
// [lo, hi] (range-pruned, FOR UPDATE SKIP LOCKED), oldest first. A row its
// binding no longer selects — deleted, disabled, or re-pointed at another
// reactor, watched kind, transition or label selector after the row was
// written (a transition that committed beside the change, or a claim that
// lapsed) — is dropped instead of delivered: a disabled binding never fires,
// and a re-pointed one never feeds the reactor it left. The bulk of such a
// backlog is deleted with the change (ApplyReactorBinding,
// DeleteReactorBinding), so a claim drops only stragglers.
//
// A claim reads the rows it returns, not the backlog: each reactor's oldest
// limit rows by its pending index, merged by age (TestPlans_ClaimReadsItsBatchNotTheBacklog).
func (s *Store) Claim(ctx context.Context, workerID string, reactors []string, lo, hi, limit int) ([]Delivery, error) {
	if len(reactors) == 0 || limit <= 0 {
		return nil, nil
	}
	for {
		ds, dropped, err := s.claimOnce(ctx, workerID, reactors, lo, hi, limit)
		// A batch of stragglers only: the rows behind them may be live.
		if err != nil || len(ds) > 0 || dropped == 0 {
			return ds, err
		}
	}
}

// claimOnce claims the oldest limit pending rows, dropping those whose
// binding is no longer enabled; it returns the claimed deliveries and how
// many rows it dropped.
func (s *Store) claimOnce(ctx context.Context, workerID string, reactors []string, lo, hi, limit int) ([]Delivery, int, error) {
	var (
		out     []Delivery
		dropped int
	)
	err := s.byKey(ctx, func(tx pgx.Tx) error {
		var err error
		out, dropped, err = claimRows(ctx, tx, workerID, reactors, lo, hi, limit)
		return err
	})
	if err != nil {
		return nil, 0, dbx.Wrap(err, "claim lifecycle deliveries (shards %d-%d)", lo, hi)
	}
	return out, dropped, nil
}

// byKey runs fn in a transaction that reaches rows by key only
// (dbx.InByKeyTx). The claim, the heartbeat and the release join a batch of
// rows to the partitions of a shard range; while the backlog is small enough
// for it to cost less, that join was planned as a hash over Seq Scans of every
// partition in the range — a read of the whole backlog, on every call, that
// grows with it (TestPlans_ClaimReadsItsBatchNotTheBacklog,
// TestPlans_ClaimPlannedOnAnEmptyOutbox).
func (s *Store) byKey(ctx context.Context, fn func(pgx.Tx) error) error {
	return dbx.InByKeyTx(ctx, s.pool, fn)
}

// claimRows is claimOnce's statement.
func claimRows(ctx context.Context, tx pgx.Tx, workerID string, reactors []string, lo, hi, limit int) ([]Delivery, int, error) {
	// lifecycle_claim (db/functions): the ordered probe a reactor and the
	// stamps by TID, under settings no statistic of the outbox can turn
	// into a read of the backlog.
	rows, err := tx.Query(ctx, `SELECT kept, resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind,
       claim_epoch, attempts, snapshot, created_at
  FROM lifecycle_claim($1, $2, $3, $4::text[], $5)`,
		workerID, lo, hi, reactors, limit)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var (
		out     []Delivery
		dropped int
	)
	for rows.Next() {
		var (
			d    Delivery
			kept bool
		)
		if err := rows.Scan(&kept, &d.Key.ResourceID, &d.Key.Transition, &d.Key.Generation, &d.Key.Binding, &d.Key.ShardID,
			&d.Reactor, &d.WatchKind, &d.ClaimEpoch, &d.Attempts, &d.Snapshot, &d.Created); err != nil {
			return nil, 0, err
		}
		if !kept {
			dropped++
			continue
		}
		out = append(out, d)
	}
	return out, dropped, rows.Err()
}

// Ack deletes a delivered row, fenced on its claim epoch (a row re-armed
// and re-claimed meanwhile is left to its new claimer). It reports whether
// the row was still ours.
func (s *Store) Ack(ctx context.Context, d Delivery) (bool, error) {
	tag, err := s.pool.Exec(ctx, `
DELETE FROM lifecycle_outbox
 WHERE shard_id BETWEEN $5 AND $5 AND shard_id = $5 AND resource_id = $1 AND transition = $2
   AND generation = $3 AND binding_name = $4 AND claim_epoch = $6`,
		d.Key.ResourceID, d.Key.Transition, d.Key.Generation, d.Key.Binding, d.Key.ShardID, d.ClaimEpoch)
	if err != nil {
		return false, dbx.Wrap(err, "ack lifecycle delivery %s", d.Key.DedupToken())
	}
	return tag.RowsAffected() == 1, nil
}

// claimsOf is ds's claims as statement arrays (resource ids and claim
// epochs, in step) and the shard range they span.
func claimsOf(ds []Delivery) (ids []uuid.UUID, epochs []int64, lo, hi int) {
	ids, epochs = make([]uuid.UUID, len(ds)), make([]int64, len(ds))
	lo, hi = 255, 0
	for i, d := range ds {
		ids[i], epochs[i] = d.Key.ResourceID, d.ClaimEpoch
		lo, hi = min(lo, d.Key.ShardID), max(hi, d.Key.ShardID)
	}
	return ids, epochs, lo, hi
}

// Heartbeat keeps the claims of running reactors alive.
func (s *Store) Heartbeat(ctx context.Context, workerID string, ds []Delivery) (int, error) {
	if len(ds) == 0 {
		return 0, nil
	}
	ids, epochs, lo, hi := claimsOf(ds)
	var tag pgconn.CommandTag
	err := s.byKey(ctx, func(tx pgx.Tx) error {
		var err error
		tag, err = tx.Exec(ctx, `
UPDATE lifecycle_outbox l SET heartbeat_at = now()
  FROM unnest($4::uuid[], $5::bigint[]) AS k(resource_id, claim_epoch)
 WHERE l.shard_id BETWEEN $2 AND $3 AND l.worker_id = $1
   AND l.resource_id = k.resource_id AND l.claim_epoch = k.claim_epoch`,
			workerID, lo, hi, ids, epochs)
		return err
	})
	if err != nil {
		return 0, dbx.Wrap(err, "heartbeat %d lifecycle deliveries", len(ds))
	}
	return int(tag.RowsAffected()), nil
}

// Release gives back the claims of deliveries this dispatcher will not
// finish (its broker is shutting down), fenced on their claim epochs: each is
// claimable again at once, by any broker, instead of when its claim lapses.
// The reactor dispatchers are woken (lifecycle_ready) when any was freed. It
// reports how many were. A delivery its binding no longer selects (re-pointed,
// disabled or deleted while it ran: lifecycle_selected) is deleted instead,
// not freed under the reactor the binding left.
func (s *Store) Release(ctx context.Context, workerID string, ds []Delivery) (int, error) {
	if len(ds) == 0 {
		return 0, nil
	}
	ids, epochs, lo, hi := claimsOf(ds)
	var n int
	err := s.byKey(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, `
WITH freed AS (
    UPDATE lifecycle_outbox l SET worker_id = NULL, claim_epoch = NULL, heartbeat_at = NULL
      FROM unnest($4::uuid[], $5::bigint[]) AS k(resource_id, claim_epoch)
     WHERE l.shard_id BETWEEN $2 AND $3 AND l.worker_id = $1
       AND l.resource_id = k.resource_id AND l.claim_epoch = k.claim_epoch
       AND lifecycle_selected(l.binding_name, l.reactor, l.watch_kind, l.transition, l.snapshot)
    RETURNING 1
), dropped AS (
    DELETE FROM lifecycle_outbox l
     USING unnest($4::uuid[], $5::bigint[]) AS k(resource_id, claim_epoch)
     WHERE l.shard_id BETWEEN $2 AND $3 AND l.worker_id = $1
       AND l.resource_id = k.resource_id AND l.claim_epoch = k.claim_epoch
       AND NOT lifecycle_selected(l.binding_name, l.reactor, l.watch_kind, l.transition, l.snapshot)
), n AS (
    SELECT count(*)::int AS n FROM freed
)
SELECT n.n FROM n LEFT JOIN LATERAL (SELECT pg_notify('lifecycle_ready', '') WHERE n.n > 0) w ON true`,
			workerID, lo, hi, ids, epochs).Scan(&n)
	})
	if err != nil {
		return 0, dbx.Wrap(err, "release %d lifecycle deliveries", len(ds))
	}
	return n, nil
}
