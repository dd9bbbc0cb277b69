package maintenance

import (
	"context"
	"time"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// RequeueFailedAndPending re-enqueues, through schedule_eligible's gate, up
// to limit lagging resources in r that have no reconcile task and were not
// touched for retryAfter (crash recovery and failed-reconcile retry).
// Terminally failed, frozen and deleting resources are skipped. It returns the
// number of reconcile tasks enqueued.
func (s *Store) RequeueFailedAndPending(ctx context.Context, r shard.Range, limit int, retryAfter time.Duration) (int, error) {
	n, err := s.count(ctx,
		`SELECT requeue_failed_and_pending($1, $2, $3, make_interval(secs => $4), coalesce($5::timestamptz, now()))`,
		r.Lo, r.Last(), limit, seconds(retryAfter), s.nowArg())
	if err != nil {
		return 0, dbx.Wrap(err, "requeue failed and pending (shards %s)", r)
	}
	return n, nil
}

// Resync is one kind's drift policy, as kind_config holds it.
type Resync struct {
	Kind, Version string
	Interval      time.Duration // re-observe a settled resource this often
	Recompose     bool          // also re-run the composer
}

// RequeueForResync re-pends up to limit settled resources of p.Kind in r whose
// last reconcile or resync is older than p.Interval, with trigger 'resync'
// and no generation bump. A kind whose kind_config does not opt into resync
// costs one primary-key probe and returns 0.
func (s *Store) RequeueForResync(ctx context.Context, p Resync, r shard.Range, limit int) (int, error) {
	n, err := s.count(ctx,
		`SELECT requeue_for_resync($1, $2, $3, $4, make_interval(secs => $5), $6, $7, coalesce($8::timestamptz, now()))`,
		p.Kind, p.Version, r.Lo, r.Last(), seconds(p.Interval), p.Recompose, limit, s.nowArg())
	if err != nil {
		return 0, dbx.Wrap(err, "requeue for resync (kind %s/%s, shards %s)", p.Kind, p.Version, r)
	}
	return n, nil
}

// Rewalk is what one RewalkRollups call did. Started and Finished are each
// true for exactly one call of a walk (whichever member made it); they carry
// the walk's start and, on the finishing call, its totals.
type Rewalk struct {
	Started  bool // this call found the crash sentinel gone and started the walk
	Walked   int  // owners this call walked
	Pended   int  // rollups (and composes) this call pended
	Finished bool // this call found every slice walked and ended the walk
	// The walk's start and totals so far, on the starting and finishing
	// calls only.
	Since                    time.Time
	WalkedTotal, PendedTotal int64
}

// RewalkRollups is the crash catch-up for composites (rewalk_rollups): after
// a crash restart emptied the UNLOGGED queue (told by the sentinel the crash
// emptied with it), every owner's rollup is re-pended through the gate, up
// to about limit owners a call over the slices of r, the walk resuming where
// the last call left it. Without a crash since the last walk it is one read
// of a one-row table and returns a zero Rewalk.
func (s *Store) RewalkRollups(ctx context.Context, r shard.Range, limit int) (Rewalk, error) {
	var w Rewalk
	var since *time.Time
	var walkedTotal, pendedTotal *int64
	err := s.db.QueryRow(ctx,
		`SELECT started, walked, pended, finished, walk_started_at, walked_total, pended_total
		   FROM rewalk_rollups($1, $2, $3, coalesce($4::timestamptz, now()))`,
		r.Lo, r.Last(), limit, s.nowArg()).
		Scan(&w.Started, &w.Walked, &w.Pended, &w.Finished, &since, &walkedTotal, &pendedTotal)
	if err != nil {
		return Rewalk{}, dbx.Wrap(err, "rewalk rollups (shards %s)", r)
	}
	if since != nil {
		w.Since = *since
	}
	if walkedTotal != nil {
		w.WalkedTotal = *walkedTotal
	}
	if pendedTotal != nil {
		w.PendedTotal = *pendedTotal
	}
	return w, nil
}
