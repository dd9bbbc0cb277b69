package maintenance

import (
	"context"
	"fmt"
	"time"
)

// RequeueFailedAndPending re-enqueues, through schedule_eligible's gate, up
// to max lagging resources in r that have no reconcile task and were not
// touched for retryAfter (crash recovery and failed-reconcile retry).
// Terminally failed, frozen and deleting resources are skipped. It returns the
// number of reconcile tasks enqueued.
func (s *Store) RequeueFailedAndPending(ctx context.Context, r ShardRange, max int, retryAfter time.Duration) (int, error) {
	n, err := s.count(ctx,
		`SELECT requeue_failed_and_pending($1, $2, $3, make_interval(secs => $4), coalesce($5::timestamptz, now()))`,
		r.Lo, r.Hi, max, seconds(retryAfter), s.nowArg())
	if err != nil {
		return 0, fmt.Errorf("requeue failed and pending (shards %s): %w", r, err)
	}
	return n, nil
}

// Resync is one kind's drift policy, as kind_config holds it.
type Resync struct {
	Kind, Version string
	Interval      time.Duration // re-observe a settled resource this often
	Recompose     bool          // also re-run the composer
}

// RequeueForResync re-pends up to max settled resources of p.Kind in r whose
// last reconcile or resync is older than p.Interval, with trigger 'resync'
// and no generation bump. A kind whose kind_config does not opt into resync
// costs one primary-key probe and returns 0.
func (s *Store) RequeueForResync(ctx context.Context, p Resync, r ShardRange, max int) (int, error) {
	n, err := s.count(ctx,
		`SELECT requeue_for_resync($1, $2, $3, $4, make_interval(secs => $5), $6, $7, coalesce($8::timestamptz, now()))`,
		p.Kind, p.Version, r.Lo, r.Hi, seconds(p.Interval), p.Recompose, max, s.nowArg())
	if err != nil {
		return 0, fmt.Errorf("requeue for resync (kind %s/%s, shards %s): %w", p.Kind, p.Version, r, err)
	}
	return n, nil
}
