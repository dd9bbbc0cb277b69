package membership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/store/internal/dbx"
)

// Action is an operator's request to a running member.
type Action string

// The actions a member acts on (cluster_members.control).
const (
	// ActionDrain: stop claiming, finish or hand back in-flight work within
	// the drain budget, deregister and exit (as on SIGTERM).
	ActionDrain Action = "drain"
	// ActionKill: exit at once without draining, as a crash would.
	ActionKill Action = "kill"
)

// Request is a pending action on a member's row.
type Request struct {
	Action Action // "" when none
	By     string // the actor who asked
	At     *time.Time
}

// Pending reports whether an action was requested.
func (r Request) Pending() bool { return r.Action != "" }

// ErrUnknownAction is a RequestControl with an action other than drain or kill.
var ErrUnknownAction = errors.New("unknown member action")

// requestSQL records the action on the member's row and wakes every member
// at once (an ungated cluster_changed: the request must not be coalesced
// away, and it makes the peers re-tile the member's shards, since a member
// with a request is no longer live). A kill is never downgraded to a drain.
// A drain clears the reported span: the member owns nothing from now on.
const requestSQL = `
WITH req AS (
    UPDATE cluster_members AS m
       SET control    = CASE WHEN m.control = 'kill' THEN 'kill' ELSE $2 END,
           control_by = CASE WHEN m.control = 'kill' THEN m.control_by ELSE $3 END,
           control_at = CASE WHEN m.control = 'kill' THEN m.control_at ELSE now() END,
           shard_lo = NULL, shard_hi = NULL
     WHERE m.member_id = $1
    RETURNING m.*
)
SELECT ` + memberColumns + `, pg_notify('cluster_changed', '') IS NULL FROM req AS cluster_members`

// RequestControl records action on member id's row, on behalf of actor, and
// returns the row. An unknown id is a dbx.ErrNotFound (store.ErrNotFound).
// Asking again is idempotent; a kill overrides a pending drain.
func (s *Store) RequestControl(ctx context.Context, id string, action Action, actor string) (Member, error) {
	if action != ActionDrain && action != ActionKill {
		return Member{}, fmt.Errorf("%w %q: want drain or kill", ErrUnknownAction, action)
	}
	rows, err := s.db.Query(ctx, requestSQL, id, string(action), actor)
	if err != nil {
		return Member{}, dbx.Wrap(err, "%s cluster member %s", action, id)
	}
	m, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (Member, error) {
		var notified bool
		return scanMemberThen(row, &notified)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return Member{}, dbx.NotFound("no cluster member %q (conctl get members lists them)", id)
	}
	if err != nil {
		return Member{}, dbx.Wrap(err, "%s cluster member %s", action, id)
	}
	return m, nil
}

// ActorSelf is the actor Leave records: the member itself, shutting down.
const ActorSelf = "self (shutting down)"

// leaveSQL marks a member that has begun to shut down as draining, as an
// admin's drain does, unless a request is there already (an admin's drain
// or kill keeps its actor and time), and wakes every member: a member with
// a request is not live (live_cluster_members), so its peers re-tile its
// shards now rather than when its drain ends and it deregisters, or when
// its last beat ages past the liveness window.
const leaveSQL = `
WITH marked AS (
    UPDATE cluster_members
       SET control = 'drain', control_by = $2, control_at = now(), shard_lo = NULL, shard_hi = NULL
     WHERE member_id = $1 AND control IS NULL
    RETURNING 1
)
SELECT count(*) > 0 FROM marked, LATERAL (SELECT pg_notify('cluster_changed', '')) AS wake`

// Leave records on member id's own row that it is shutting down (a drain
// by ActorSelf), so its peers take its shards while it drains. It reports
// whether the row was marked: false when the row is gone or already
// carries a request.
func (s *Store) Leave(ctx context.Context, id string) (bool, error) {
	var marked bool
	if err := s.db.QueryRow(ctx, leaveSQL, id, ActorSelf).Scan(&marked); err != nil {
		return false, dbx.Wrap(err, "mark cluster member %s leaving", id)
	}
	return marked, nil
}

// PendingRequest reads the action requested on member id's own row (zero
// when none, or when the row is gone).
func (s *Store) PendingRequest(ctx context.Context, id string) (Request, error) {
	var r Request
	err := s.db.QueryRow(ctx, `
SELECT coalesce(control, ''), coalesce(control_by, ''), control_at FROM cluster_members WHERE member_id = $1`, id).
		Scan(&r.Action, &r.By, &r.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return Request{}, nil
	}
	if err != nil {
		return Request{}, dbx.Wrap(err, "read the requests of cluster member %s", id)
	}
	return r, nil
}
