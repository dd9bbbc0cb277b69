package resolvers

import (
	"context"
	"encoding/json"

	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/graph/model"
)

func actor(ctx context.Context) string { return auth.FromContext(ctx).Actor() }

// dryRunCtx marks ctx a store dry run when dryRun is set.
func dryRunCtx(ctx context.Context, dryRun *bool) context.Context {
	if deref(dryRun) {
		return store.WithDryRun(ctx)
	}
	return ctx
}

func (m mutationResolver) ApplyResource(ctx context.Context, in model.ResourceInput, dryRun *bool) (*model.Resource, error) {
	labels, err := labelMap("labels", in.Labels)
	if err != nil {
		return nil, err
	}
	r, _, err := m.store.ApplyResource(ctx, store.ApplyResourceInput{Kind: in.Kind, Name: in.Name,
		Version: deref(in.Version), Labels: labels, Spec: in.Spec, ProviderConfigRef: deref(in.ProviderConfigRef),
		Actor: actor(ctx), DryRun: deref(dryRun)})
	if err != nil {
		return nil, err
	}
	return toPlanned(r, deref(dryRun)), nil
}

func (m mutationResolver) DeleteResource(ctx context.Context, kind, name string) (*model.Resource, error) {
	r, err := m.store.RequestDeletion(ctx, kind, name, actor(ctx))
	if err != nil {
		return nil, err
	}
	return toResource(r), nil
}

func (m mutationResolver) QuarantineResource(ctx context.Context, kind, name string) (*model.Resource, error) {
	r, err := m.store.Quarantine(ctx, kind, name, actor(ctx))
	if err != nil {
		return nil, err
	}
	return toResource(r), nil
}

func (m mutationResolver) UnquarantineResource(ctx context.Context, kind, name string) (*model.Resource, error) {
	r, err := m.store.Unquarantine(ctx, kind, name, actor(ctx))
	if err != nil {
		return nil, err
	}
	return toResource(r), nil
}

func (m mutationResolver) ResyncResource(ctx context.Context, kind, name string) (*model.Resource, error) {
	r, err := m.store.Resync(ctx, kind, name, actor(ctx))
	if err != nil {
		return nil, err
	}
	return toResource(r), nil
}

func (m mutationResolver) RunOperation(ctx context.Context, kind, name, verb string, input json.RawMessage) (*model.Operation, error) {
	op, err := m.store.RunOperation(ctx, kind, name, verb, input, actor(ctx))
	if err != nil {
		return nil, err
	}
	return toOperation(op), nil
}

func (m mutationResolver) ApplyKindManifest(ctx context.Context, manifest json.RawMessage, acceptBreaking *bool, dryRun *bool) (*model.Kind, error) {
	apply := m.store.ApplyManifestWith
	if deref(dryRun) {
		apply = m.store.DryRunManifestWith
	}
	k, _, err := apply(ctx, manifest, store.ManifestApplyOptions{AcceptBreaking: deref(acceptBreaking)})
	if err != nil {
		return nil, err
	}
	return toKind(k), nil
}

func (m mutationResolver) UpdateKindConfig(ctx context.Context, kind, version string, in model.KindConfigInput) (*model.KindConfig, error) {
	c, err := m.store.UpdateKindConfig(ctx, kind, version, store.KindConfigPatch{MaxInflight: in.MaxInflight,
		TaskDeadlineSecs: in.TaskDeadlineSecs, ResyncIntervalSecs: in.ResyncIntervalSecs,
		ResyncRecomposes: in.ResyncRecomposes, OrphanGraceSecs: in.OrphanGraceSecs,
		MaxTransientAttempts: in.MaxTransientAttempts})
	if err != nil {
		return nil, err
	}
	return toKindConfig(c), nil
}

func (m mutationResolver) ApplyProviderConfig(ctx context.Context, in model.ProviderConfigInput,
	dryRun *bool) (*model.ProviderConfig, error) {
	pc, _, err := m.store.ApplyProviderConfig(dryRunCtx(ctx, dryRun), store.ProviderConfigInput{Kind: in.Kind, Name: in.Name,
		IsDefault: in.IsDefault, Spec: in.Spec, Data: in.Data})
	if err != nil {
		return nil, err
	}
	return toProviderConfig(pc), nil
}

func (m mutationResolver) DeleteProviderConfig(ctx context.Context, kind, name string) (bool, error) {
	if err := m.store.DeleteProviderConfig(ctx, kind, name); err != nil {
		return false, err
	}
	return true, nil
}

func (m mutationResolver) ApplyReactorBinding(ctx context.Context, in model.ReactorBindingInput,
	dryRun *bool) (*model.ReactorBinding, error) {
	lm, err := labelMap("labelMatch", in.LabelMatch)
	if err != nil {
		return nil, err
	}
	b, _, err := m.store.ApplyReactorBinding(dryRunCtx(ctx, dryRun), store.ReactorBindingInput{Name: in.Name, WatchKind: in.WatchKind,
		Transition: fromTransition(in.Transition), Reactor: in.Reactor, LabelMatch: lm, Enabled: in.Enabled})
	if err != nil {
		return nil, err
	}
	return toBinding(b), nil
}

func (m mutationResolver) DeleteReactorBinding(ctx context.Context, name string) (bool, error) {
	if err := m.store.DeleteReactorBinding(ctx, name); err != nil {
		return false, err
	}
	return true, nil
}
