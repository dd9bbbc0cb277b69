package resolvers

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/graph/model"
)

// The nested fields of Resource, Operation and ProviderConfig: each one
// Load on the response's dataloaders.

func (r resourceResolver) Owner(ctx context.Context, obj *model.Resource) (*model.Resource, error) {
	if obj.OwnerID == nil {
		return nil, nil
	}
	return r.byID(ctx, *obj.OwnerID)
}

func (r resourceResolver) Root(ctx context.Context, obj *model.Resource) (*model.Resource, error) {
	if obj.RootID == nil {
		return nil, nil
	}
	return r.byID(ctx, *obj.RootID)
}

func (r *Resolver) byID(ctx context.Context, id uuid.UUID) (*model.Resource, error) {
	res, ok, err := found(loadersFrom(ctx).resources.Load(ctx, id))
	if err != nil || !ok {
		return nil, err
	}
	return toResource(res), nil
}

// The bounds of the nested lists' first: a nested page above its bound is
// refused, naming it (a top-level list serves such a page cut to 500).
const (
	maxNestedPage     = 500 // children, dependencies, dependents, history
	maxOperationsPage = 100 // operations
)

// nestedFirst is a nested list's page size: def when first is absent,
// else first, refused unless it is 1-bound.
func nestedFirst(first *int, def, bound int) (int, error) {
	n := def
	if first != nil {
		n = *first
	}
	if n < 1 || n > bound {
		return 0, &store.InvalidError{Field: "first", Rule: "limit_invalid",
			Message: fmt.Sprintf("first must be 1-%d, got %d", bound, n)}
	}
	return n, nil
}

func (r resourceResolver) Children(ctx context.Context, obj *model.Resource, phases []model.Phase, first *int,
	after *string) (*model.ResourcePage, error) {
	n, err := nestedFirst(first, 50, maxNestedPage)
	if err != nil {
		return nil, err
	}
	key := store.ChildrenKey{OwnerID: obj.UUID, Phases: store.PhaseKey(fromPhases(phases)), Limit: n, After: deref(after)}
	page, ok, err := found(loadersFrom(ctx).children.Load(ctx, key))
	if err != nil {
		return nil, err
	}
	if !ok {
		page = store.Page{Items: []resource.Resource{}}
	}
	return toPage(page), nil
}

func (r resourceResolver) Dependencies(ctx context.Context, obj *model.Resource, first *int) ([]*model.Dependency, error) {
	n, err := nestedFirst(first, 100, maxNestedPage)
	if err != nil {
		return nil, err
	}
	deps, _, err := found(loadersFrom(ctx).deps.Load(ctx, store.DependenciesKey{ID: obj.UUID, Limit: n}))
	if err != nil {
		return nil, err
	}
	out := make([]*model.Dependency, len(deps))
	for i, d := range deps {
		flows := make([]*model.ValueFlow, len(d.ValueFlows))
		for j, f := range d.ValueFlows {
			flows[j] = &model.ValueFlow{SrcField: f.Src, DepField: f.Dep}
		}
		out[i] = &model.Dependency{Upstream: toResource(d.Upstream), ValueFlows: flows}
	}
	return out, nil
}

func (r resourceResolver) Dependents(ctx context.Context, obj *model.Resource, first *int) ([]*model.Resource, error) {
	n, err := nestedFirst(first, 100, maxNestedPage)
	if err != nil {
		return nil, err
	}
	rs, _, err := found(loadersFrom(ctx).dependents.Load(ctx, store.DependentsKey{ID: obj.UUID, Limit: n}))
	if err != nil {
		return nil, err
	}
	return toResources(rs), nil
}

func (r resourceResolver) Conditions(ctx context.Context, obj *model.Resource) ([]*model.Condition, error) {
	stored, _, err := found(loadersFrom(ctx).conditions.Load(ctx, obj.UUID))
	if err != nil {
		return nil, err
	}
	merged := resource.MergeConditions(fromResource(obj), stored)
	out := make([]*model.Condition, len(merged))
	for i, c := range merged {
		out[i] = toCondition(c)
	}
	return out, nil
}

func (r resourceResolver) ProviderConfig(ctx context.Context, obj *model.Resource) (*model.ProviderConfig, error) {
	key := store.ConfigKey{Kind: obj.Kind, Name: deref(obj.ProviderConfigRef)}
	pc, ok, err := found(loadersFrom(ctx).configs.Load(ctx, key))
	if err != nil || !ok || pc == nil {
		return nil, err
	}
	return toProviderConfig(*pc), nil
}

func (r resourceResolver) Definition(ctx context.Context, obj *model.Resource) (*model.Kind, error) {
	k, ok, err := found(loadersFrom(ctx).kinds.Load(ctx, manifest.KindVersion{Kind: obj.Kind, Version: obj.Version}))
	if err != nil || !ok || k == nil {
		return nil, err
	}
	return toKind(*k), nil
}

func (r resourceResolver) Operations(ctx context.Context, obj *model.Resource, first *int) ([]*model.Operation, error) {
	n, err := nestedFirst(first, 20, maxOperationsPage)
	if err != nil {
		return nil, err
	}
	ops, _, err := found(loadersFrom(ctx).operations.Load(ctx, store.OperationsKey{ResourceID: obj.UUID, Limit: n}))
	if err != nil {
		return nil, err
	}
	out := make([]*model.Operation, len(ops))
	for i, op := range ops {
		out[i] = toOperation(op)
	}
	return out, nil
}

// History reads through the response's loader: a page's rows' events in
// one statement (per distinct first and after). A bad cursor is refused
// before the load, so it fails only its own field.
func (r resourceResolver) History(ctx context.Context, obj *model.Resource, first *int, after *string) (*model.HistoryEventPage, error) {
	n, err := nestedFirst(first, 50, maxNestedPage)
	if err != nil {
		return nil, err
	}
	if err := store.CheckEventsCursor(deref(after)); err != nil {
		return nil, err
	}
	page, _, err := found(loadersFrom(ctx).events.Load(ctx, store.EventsKey{ResourceID: obj.UUID, Limit: n, After: deref(after)}))
	if err != nil {
		return nil, err
	}
	out := &model.HistoryEventPage{Items: make([]*model.HistoryEvent, len(page.Items)), NextCursor: optString(page.NextCursor)}
	for i, ev := range page.Items {
		typ := model.HistoryEventTypeNormal
		if ev.Type == resource.EventWarning {
			typ = model.HistoryEventTypeWarning
		}
		out.Items[i] = &model.HistoryEvent{ID: fmtInt(ev.ID), Type: typ, Reason: ev.Reason, Message: ev.Message,
			Actor: ev.Actor, CreatedAt: ev.CreatedAt}
	}
	return out, nil
}

func (o operationResolver) Resource(ctx context.Context, obj *model.Operation) (*model.Resource, error) {
	res, err := o.byID(ctx, obj.ResourceID)
	if err != nil {
		return nil, err
	}
	if res == nil {
		return nil, store.ErrNotFound
	}
	return res, nil
}

func (p providerConfigResolver) Owner(ctx context.Context, obj *model.ProviderConfig) (*model.Resource, error) {
	if obj.OwnerID == nil {
		return nil, nil
	}
	return p.byID(ctx, *obj.OwnerID)
}
