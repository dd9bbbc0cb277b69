package resolvers

import (
	"context"

	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/graph/model"
)

// The subscriptions register with the hub for as long as the subscription's
// context lives; the hub closes the channel when it ends (or, for
// operationUpdated, after the final state).

func (s subscriptionResolver) ResourceChanged(ctx context.Context, kind, name, ownerID *string,
	phases []model.Phase, rootID *string) (<-chan *model.ResourceEvent, error) {
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
	if rootID != nil {
		id, err := parseID("rootId", *rootID)
		if err != nil {
			return nil, err
		}
		f.RootID = &id
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

// SubtreeProgress follows an existing root (an unknown id is NOT_FOUND,
// read from the primary so a root just applied is found).
func (s subscriptionResolver) SubtreeProgress(ctx context.Context, rootID string) (<-chan *model.SubtreeProgress, error) {
	id, err := parseID("rootId", rootID)
	if err != nil {
		return nil, err
	}
	if _, err := s.primary.GetResourceByID(ctx, id); err != nil {
		return nil, err
	}
	return live.SubscribeSubtree(ctx, s.hub, id, toSubtreeProgress), nil
}

func (s subscriptionResolver) Kinds(ctx context.Context) (<-chan []*model.Kind, error) {
	return live.SubscribeKinds(ctx, s.hub, func(ks []store.Kind) []*model.Kind {
		out := make([]*model.Kind, len(ks))
		for i, k := range ks {
			out[i] = toKind(k)
		}
		return out
	}), nil
}

func (s subscriptionResolver) ProviderConfigs(ctx context.Context, kind *string) (<-chan []*model.ProviderConfig, error) {
	return live.SubscribeProviderConfigs(ctx, s.hub, deref(kind), func(ps []store.ProviderConfig) []*model.ProviderConfig {
		out := make([]*model.ProviderConfig, len(ps))
		for i, p := range ps {
			out[i] = toProviderConfig(p)
		}
		return out
	}), nil
}

func (s subscriptionResolver) ReactorBindings(ctx context.Context, watchKind, reactor *string) (<-chan []*model.ReactorBinding, error) {
	return live.SubscribeReactorBindings(ctx, s.hub, deref(watchKind), deref(reactor),
		func(bs []store.ReactorBinding) []*model.ReactorBinding {
			out := make([]*model.ReactorBinding, len(bs))
			for i, b := range bs {
				out[i] = toBinding(b)
			}
			return out
		}), nil
}
