package resolvers

import (
	"context"
	"errors"
	"time"

	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/graph/model"
)

var errNoControl = errors.New("member control is not wired into this schema (resolvers.Deps.Control)")

func (m mutationResolver) DrainClusterMember(ctx context.Context, id string) (*model.ClusterMember, error) {
	return m.requestControl(ctx, id, membership.ActionDrain)
}

func (m mutationResolver) KillClusterMember(ctx context.Context, id string) (*model.ClusterMember, error) {
	return m.requestControl(ctx, id, membership.ActionKill)
}

func (m mutationResolver) requestControl(ctx context.Context, id string, a membership.Action) (*model.ClusterMember, error) {
	if m.control == nil {
		return nil, errNoControl
	}
	mem, err := m.control.Request(ctx, id, a, actor(ctx))
	if err != nil {
		return nil, err
	}
	liveness := m.liveness
	if liveness <= 0 {
		liveness = membership.DefaultLiveness
	}
	return toMember(live.Member{Member: mem, Ready: time.Since(mem.LastHeartbeat) <= liveness}), nil
}

func ptr[T any](v T) *T { return &v }
