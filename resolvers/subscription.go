package resolvers

import (
	"context"

	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/graph/model"
)

// The subscriptions register with the hub for as long as the subscription's
// context lives; the hub closes the channel when it ends (or, for
// operationUpdated, after the final state).

func (s subscriptionResolver) ResourceChanged(ctx context.Context, kind, name, ownerID *string,
	phases []model.Phase) (<-chan *model.ResourceEvent, error) {
	f := live.ResourceFilter{Kind: deref(kind), Name: deref(name), Phases: fromPhases(phases)}
	for _, p := range f.Phases {
		if !p.Valid() {
			return nil, errPhase(p)
		}
	}
	if ownerID != nil {
		id, err := parseID("ownerId", *ownerID)
		if err != nil {
			return nil, err
		}
		f.OwnerID = &id
	}
	return live.SubscribeResources(ctx, s.hub, f, func(c live.Change) *model.ResourceEvent {
		return live.Shared(c, toEvent)
	}), nil
}

func (s subscriptionResolver) PhaseCounts(ctx context.Context, kind *string) (<-chan []*model.PhaseCount, error) {
	return live.SubscribePhaseCounts(ctx, s.hub, deref(kind), toPhaseCounts), nil
}

func (s subscriptionResolver) ClusterMembers(ctx context.Context) (<-chan []*model.ClusterMember, error) {
	return live.SubscribeMembers(ctx, s.hub, toMembers)
}

func (s subscriptionResolver) OperationUpdated(ctx context.Context, id string) (<-chan *model.Operation, error) {
	uid, err := parseID("id", id)
	if err != nil {
		return nil, err
	}
	return live.SubscribeOperation(ctx, s.hub, uid, toOperation)
}
