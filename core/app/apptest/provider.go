package apptest

import (
	"context"
	"sync/atomic"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// WorkFunc is what a Provider does with each stage.
type WorkFunc func(context.Context, worker.Request) (worker.Outcome, error)

// Provider is a worker provider built from a function, for a test's own
// kinds: version v1, no config handling, ready until SetReady(false).
type Provider struct {
	kv    manifest.KindVersion
	work  WorkFunc
	ready atomic.Bool
}

var _ worker.Provider = (*Provider)(nil)

// NewProvider serves kind (version v1) with work.
func NewProvider(kind string, work WorkFunc) *Provider {
	p := &Provider{kv: manifest.KindVersion{Kind: kind, Version: "v1"}, work: work}
	p.ready.Store(true)
	return p
}

// SetReady flips what the provider reports to the broker.
func (p *Provider) SetReady(ok bool) { p.ready.Store(ok) }

// Kind implements worker.Provider.
func (p *Provider) Kind() manifest.KindVersion { return p.kv }

// Work implements worker.Provider.
func (p *Provider) Work(ctx context.Context, r worker.Request) (worker.Outcome, error) {
	return p.work(ctx, r)
}

// OnConfig implements worker.Provider (configs are ignored).
func (p *Provider) OnConfig(worker.ProviderConfig) {}

// Ready implements worker.Provider.
func (p *Provider) Ready() bool { return p.ready.Load() }
