package cluster

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/store/membership"
)

// ControlStore records a drain or kill on a member's row.
type ControlStore interface {
	RequestControl(ctx context.Context, id string, action membership.Action, actor string) (membership.Member, error)
}

// Controller is the API side of member control: it records an admin's
// drain or kill request (the member acts on it, see ControlWatcher) and
// audits it as one log line with the actor.
type Controller struct {
	Store ControlStore
	Log   zerolog.Logger
}

// Request records action on member id for actor and returns the member's row.
func (c *Controller) Request(ctx context.Context, id string, action membership.Action, actor string) (membership.Member, error) {
	m, err := c.Store.RequestControl(ctx, id, action, actor)
	if err != nil {
		return m, err
	}
	c.Log.Warn().Str("member_id", id).Str("role", m.Role).Str("action", string(action)).Str("actor", actor).
		Str("recorded_action", string(m.Request.Action)).Msg("cluster member " + string(action) + " requested")
	return m, nil
}
