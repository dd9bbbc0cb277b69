package maintenance

import (
	"context"
	"time"

	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// ReapStaleWork frees the leased work_queue rows in r whose heartbeat is
// older than staleAfter (their worker died), so they can be claimed again.
// It returns the number freed.
func (s *Store) ReapStaleWork(ctx context.Context, r shard.Range, staleAfter time.Duration) (int, error) {
	n, err := s.count(ctx,
		`SELECT reap_stale_work($1, $2, make_interval(secs => $3), coalesce($4::timestamptz, now()))`,
		r.Lo, r.Last(), seconds(staleAfter), s.nowArg())
	if err != nil {
		return 0, dbx.Wrap(err, "reap stale work (shards %s)", r)
	}
	return n, nil
}

// DefaultUnclaimedAfter is how long a task may sit unclaimed before
// DeleteUnclaimedWork drops it (SWEEPER_UNCLAIMED_DELETE_AFTER).
const DefaultUnclaimedAfter = 24 * time.Hour

// DeleteUnclaimedWork hard-deletes the work_queue rows in r that have been
// claimable for longer than after without any worker claiming them. The
// resources stay lagging (or Failed, a synced row's failed resync), so a
// returning worker gets fresh tasks from the reaper's retry. An
// operation whose task it drops is failed, its error naming the window; a
// synced composite's pending rollup, which nothing would pend again, is
// kept. It returns the number deleted.
func (s *Store) DeleteUnclaimedWork(ctx context.Context, r shard.Range, after time.Duration) (int, error) {
	n, err := s.count(ctx,
		`SELECT delete_unclaimed_work($1, $2, make_interval(secs => $3), coalesce($4::timestamptz, now()))`,
		r.Lo, r.Last(), seconds(after), s.nowArg())
	if err != nil {
		return 0, dbx.Wrap(err, "delete unclaimed work (shards %s)", r)
	}
	return n, nil
}

// ReapStaleLifecycle re-arms the claimed lifecycle_outbox deliveries in r
// whose reactor dispatcher stopped heartbeating for staleAfter (at-least-once
// delivery). It returns the number re-armed.
func (s *Store) ReapStaleLifecycle(ctx context.Context, r shard.Range, staleAfter time.Duration) (int, error) {
	n, err := s.count(ctx,
		`SELECT reap_stale_lifecycle($1, $2, make_interval(secs => $3), coalesce($4::timestamptz, now()))`,
		r.Lo, r.Last(), seconds(staleAfter), s.nowArg())
	if err != nil {
		return 0, dbx.Wrap(err, "reap stale lifecycle (shards %s)", r)
	}
	return n, nil
}
