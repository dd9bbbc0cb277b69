package resolvers

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/graph/model"
)

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// nilOnNotFound maps a store.ErrNotFound to a null result.
func nilOnNotFound[T any](v *T, err error) (*T, error) {
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (q queryResolver) Resource(ctx context.Context, kind, name string) (*model.Resource, error) {
	r, err := q.store.GetResource(ctx, kind, name)
	return nilOnNotFound(toResource(r), err)
}

func (q queryResolver) ResourceByID(ctx context.Context, id string) (*model.Resource, error) {
	uid, err := parseID("id", id)
	if err != nil {
		return nil, err
	}
	r, err := q.store.GetResourceByID(ctx, uid)
	return nilOnNotFound(toResource(r), err)
}

func (q queryResolver) Resources(ctx context.Context, kind *string, phases []model.Phase, labels json.RawMessage,
	ownerID *string, first *int, after *string) (*model.ResourcePage, error) {
	opts := store.ListOptions{Kind: deref(kind), Phases: fromPhases(phases), Limit: deref(first), After: deref(after)}
	var err error
	if opts.Labels, err = labelMap("labels", labels); err != nil {
		return nil, err
	}
	if ownerID != nil {
		id, err := parseID("ownerId", *ownerID)
		if err != nil {
			return nil, err
		}
		opts.OwnerID = &id
	}
	if first != nil && *first == 0 {
		return nil, &store.InvalidError{Field: "first", Rule: "limit_invalid", Message: "page size must be at least 1, got 0 (a page above 500 is served as 500)"}
	}
	page, err := q.store.ListResources(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := prefetch(ctx, itemsSelection(ctx, "ResourcePage"), page.Items); err != nil {
		return nil, err
	}
	return toPage(page), nil
}

func (q queryResolver) PhaseCounts(ctx context.Context, kind *string) ([]*model.PhaseCount, error) {
	cs, err := q.store.PhaseCounts(ctx, deref(kind))
	if err != nil {
		return nil, err
	}
	return toPhaseCounts(cs), nil
}

func (q queryResolver) Kinds(ctx context.Context) ([]*model.Kind, error) {
	ks, err := q.store.ListKinds(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*model.Kind, len(ks))
	kvs := make([]manifest.KindVersion, len(ks))
	for i, k := range ks {
		out[i] = toKind(k)
		kvs[i] = manifest.KindVersion{Kind: k.Name, Version: k.Version}
	}
	if err := prefetchUsage(ctx, kvs); err != nil {
		return nil, err
	}
	return out, nil
}

func (q queryResolver) Kind(ctx context.Context, name string, version *string) (*model.Kind, error) {
	k, err := q.store.GetKind(ctx, name, deref(version))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return toKind(k), nil
}

func (q queryResolver) ProviderConfigs(ctx context.Context, kind, name *string, isDefault *bool, first *int,
	after *string) (*model.ProviderConfigPage, error) {
	if first != nil && *first == 0 {
		return nil, &store.InvalidError{Field: "first", Rule: "limit_invalid", Message: "page size must be at least 1, got 0 (a page above 500 is served as 500)"}
	}
	page, err := q.store.ListProviderConfigs(ctx, store.ProviderConfigListOptions{
		Kind: deref(kind), Name: deref(name), IsDefault: isDefault, Limit: deref(first), After: deref(after)})
	if err != nil {
		return nil, err
	}
	out := &model.ProviderConfigPage{Items: make([]*model.ProviderConfig, len(page.Items)), NextCursor: optString(page.NextCursor)}
	for i, pc := range page.Items {
		out.Items[i] = toProviderConfig(pc)
	}
	return out, nil
}

func (q queryResolver) ReactorBindings(ctx context.Context, watchKind, reactor *string) ([]*model.ReactorBinding, error) {
	bs, err := q.store.ListReactorBindings(ctx, deref(watchKind), deref(reactor))
	if err != nil {
		return nil, err
	}
	out := make([]*model.ReactorBinding, len(bs))
	for i, b := range bs {
		out[i] = toBinding(b)
	}
	return out, nil
}

func (q queryResolver) ClusterMembers(ctx context.Context) ([]*model.ClusterMember, error) {
	ms, err := q.hub.ListMembers(ctx)
	if err != nil {
		return nil, err
	}
	return toMembers(ms), nil
}

func (q queryResolver) Operation(ctx context.Context, id string) (*model.Operation, error) {
	uid, err := parseID("id", id)
	if err != nil {
		return nil, err
	}
	op, err := q.store.GetOperation(ctx, uid)
	return nilOnNotFound(toOperation(op), err)
}

func (q queryResolver) Version(context.Context) (string, error) { return q.version, nil }

func (q queryResolver) Viewer(ctx context.Context) (*model.Viewer, error) {
	role := model.APIRoleAdmin
	if auth.FromContext(ctx).Role == auth.RoleViewer {
		role = model.APIRoleViewer
	}
	return &model.Viewer{Role: role, AuthRequired: q.authRequired}, nil
}
