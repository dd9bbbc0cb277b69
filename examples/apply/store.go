package apply

import (
	"context"
	"encoding/json"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
)

// StoreApplier applies documents through core/store in-process.
type StoreApplier struct {
	Store *store.Store
	// Actor is recorded on resource events ("" = system).
	Actor string
}

var _ Applier = StoreApplier{}

// ApplyManifest applies a kind manifest.
func (s StoreApplier) ApplyManifest(ctx context.Context, raw json.RawMessage) error {
	_, _, err := s.Store.ApplyManifest(ctx, raw)
	return err
}

// ApplyProviderConfig applies a providerconfig.
func (s StoreApplier) ApplyProviderConfig(ctx context.Context, pc ProviderConfig) error {
	_, _, err := s.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: pc.Kind, Name: pc.Name,
		IsDefault: pc.IsDefault, Spec: pc.Spec, Data: pc.Data})
	return err
}

// ApplyReactorBinding applies a reactor binding.
func (s StoreApplier) ApplyReactorBinding(ctx context.Context, b ReactorBinding) error {
	_, _, err := s.Store.ApplyReactorBinding(ctx, store.ReactorBindingInput{Name: b.Name, WatchKind: b.WatchKind,
		Transition: manifest.Transition(b.Transition), Reactor: b.Reactor, LabelMatch: b.LabelMatch, Enabled: b.Enabled})
	return err
}

// ApplyResource applies a resource.
func (s StoreApplier) ApplyResource(ctx context.Context, r Resource) error {
	_, _, err := s.Store.ApplyResource(ctx, store.ApplyResourceInput{Kind: r.Kind, Name: r.Name, Version: r.Version,
		Labels: r.Labels, Spec: r.Spec, ProviderConfigRef: r.ProviderConfigRef, Actor: s.Actor})
	return err
}
