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
