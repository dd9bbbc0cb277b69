// Package stdcel is the built-in resource-graph composer, in the manner of
// kro: the kind's providerconfig spec lists resource templates, and the
// children, the dependencies between them and the values flowing along
// those dependencies are all inferred from the CEL expressions (${…}) the
// templates hold. A template reading ${schema.spec.cidr} reads the
// composite's own spec; one reading ${vpc.spec.region} or ${vpc.name}
// depends on vpc; a spec value that is exactly ${vpc.status.vpc_id} depends
// on vpc and becomes a value flow — the core copies vpc's status field
// into the dependent's spec when vpc has converged, and again whenever it
// changes. References to unknown resources, computations over another
// resource's status (which is not known at compose time), and cycles are
// refused with an error naming the resource and field. The graph's status
// projection (a status template over the children) is evaluated at
// rollup. See docs/builtin-providers.md.
package stdcel

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// maxCachedPlans bounds the compiled-graph cache (edited configs leave old
// graphs behind).
const maxCachedPlans = 256

// Provider composes one (kind, version) from the graph in its
// providerconfig.
type Provider struct {
	kv  manifest.KindVersion
	log zerolog.Logger

	mu    sync.Mutex
	plans map[[32]byte]*Plan
}

// New returns a stdcel provider for kv.
func New(kv manifest.KindVersion, log zerolog.Logger) *Provider {
	if kv.Version == "" {
		kv.Version = manifest.DefaultVersion
	}
	return &Provider{kv: kv, plans: map[[32]byte]*Plan{},
		log: log.With().Str("provider", "stdcel").Str("kind", kv.Kind).Str("version", kv.Version).Logger()}
}

// Kind is the (kind, version) served.
func (p *Provider) Kind() manifest.KindVersion { return p.kv }

// Ready is always true: a bad graph fails its composes with the reason, on
// the resource, where its owner looks.
func (p *Provider) Ready() bool { return true }

// OnConfig checks the default graph and logs what is wrong with it.
func (p *Provider) OnConfig(cfg worker.ProviderConfig) {
	if _, err := p.plan(worker.EffectiveConfig{Name: cfg.Name, Spec: cfg.Spec}); err != nil {
		p.log.Warn().Err(err).Str("config", cfg.Name).Msg("stdcel graph refused; composes will fail until it is fixed")
		return
	}
	p.log.Info().Str("config", cfg.Name).Msg("stdcel graph compiled")
}

// plan compiles the config's graph (cached by its bytes).
func (p *Provider) plan(cfg worker.EffectiveConfig) (*Plan, error) {
	key := sha256.Sum256(cfg.Spec)
	p.mu.Lock()
	pl, ok := p.plans[key]
	p.mu.Unlock()
	if ok {
		return pl, nil
	}
	g, err := ParseGraph(cfg.Spec)
	if err != nil {
		return nil, fmt.Errorf("providerconfig %q: %w", cfg.Name, err)
	}
	pl, err = Compile(g)
	if err != nil {
		return nil, fmt.Errorf("providerconfig %q: %w", cfg.Name, err)
	}
	p.mu.Lock()
	if len(p.plans) >= maxCachedPlans {
		p.plans = map[[32]byte]*Plan{}
	}
	p.plans[key] = pl
	p.mu.Unlock()
	return pl, nil
}

// Work composes (StageCompose) or rolls up (StageRollup). An evaluation
// the task's end (its deadline, a cancellation) interrupted is a transient
// failure: neither its error nor its partial status is the graph's.
func (p *Provider) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	out, err := p.work(ctx, req)
	if ctx.Err() != nil {
		return worker.Outcome{}, fmt.Errorf("stdcel: the task ended before the evaluation did (its deadline passed, or it was cancelled): %w", ctx.Err())
	}
	return out, err
}

func (p *Provider) work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	if req.Stage != worker.StageCompose && req.Stage != worker.StageRollup {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("stdcel: reaction %s at stage %s: a stdcel kind has only compose and rollup reactions",
			req.Reaction, req.Stage))
	}
	pl, err := p.plan(req.Config)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	comp := Composite{Name: req.Resource.Name, Labels: req.Resource.Labels, Spec: req.Resource.Spec}
	children, edges, err := pl.Children(ctx, comp)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	if req.Stage == worker.StageCompose {
		status, _ := json.Marshal(map[string]any{"phase": "composed", "resources": len(children)})
		return worker.Outcome{Children: children, Edges: edges, Status: status}, nil
	}
	return p.rollup(ctx, req, pl, comp, children)
}

// StatusCondition is the condition a rollup sets when a status field's
// expression fails for a reason other than a missing input, naming the
// field and the CEL error.
const StatusCondition = "StatusProjection"

func (p *Provider) rollup(ctx context.Context, req worker.Request, pl *Plan, comp Composite, children []worker.Child) (worker.Outcome, error) {
	idOf := map[worker.Ref]string{}
	names := map[string]string{}
	for i, n := range pl.nodes {
		idOf[worker.Ref{Kind: children[i].Kind, Name: children[i].Name}] = n.t.ID
		names[n.t.ID] = children[i].Name
	}
	seen := map[string]Observed{}
	ready := 0
	for _, c := range req.Children {
		if c.Phase == "Ready" {
			ready++
		}
		if id, ok := idOf[worker.Ref{Kind: c.Kind, Name: c.Name}]; ok {
			seen[id] = Observed{Phase: c.Phase, Status: c.Status}
		}
	}
	res, err := pl.Status(ctx, comp, seen, names)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	status := res.Fields
	status["phase"], status["resources"], status["ready"] = "rolled-up", len(req.Children), ready
	if len(res.Unresolved) > 0 {
		status["unresolved"] = res.Unresolved
	}
	healthy := ready == len(req.Children)
	b, err := json.Marshal(status)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("status: %w", err))
	}
	out := worker.Outcome{HealthOK: &healthy, Status: b}
	if !healthy {
		out.Conditions = []worker.Condition{{Type: "Ready", Status: "False", Reason: "ChildrenNotReady",
			Message: fmt.Sprintf("%d of %d resources not ready", len(req.Children)-ready, len(req.Children))}}
	}
	if len(res.Failed) > 0 {
		msgs := make([]string, len(res.Failed))
		for i, f := range res.Failed {
			msgs[i] = fmt.Sprintf("status.%s: %v", f.Field, f.Err)
		}
		out.Conditions = append(out.Conditions, worker.Condition{Type: StatusCondition, Status: "False", Reason: "EvaluationFailed",
			Message: strings.Join(msgs, "; ")})
	}
	return out, nil
}
