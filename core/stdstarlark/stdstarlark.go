// Package stdstarlark is the built-in composer that runs a Starlark
// program carried in the kind's providerconfig bundle: compose(resource) in
// main.star returns the children, the edges between them (with value flows)
// and a status. The program is sandboxed: no I/O (load reads only the
// bundle's own files), a step budget and a time limit (the providerconfig
// spec's max_steps and timeout_ms, capped), and no while loops or
// recursion; an error fails the compose terminally, naming the file and
// line. Rollup counts the subtree's phases. stdworker serves it
// (--kind K=stdstarlark) and examples/datadriven uses it.
package stdstarlark

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/rs/zerolog"
	starlarkjson "go.starlark.net/lib/json"
	"go.starlark.net/starlark"
	"go.starlark.net/syntax"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// OwnerLabel is the label every child gets: the composite's name. A
// program may not set it to anything else.
const OwnerLabel = "stdstarlark"

// Entry is the bundle file the program starts in, and
// ComposeFunc the function it must define.
const (
	Entry       = "main.star"
	ComposeFunc = "compose"
)

// Limits is the stdstarlark providerconfig spec: the sandbox's
// budget for one compose. Zero fields take the defaults; values above the
// caps are refused.
type Limits struct {
	MaxSteps  uint64 `json:"max_steps,omitempty"`
	TimeoutMS int    `json:"timeout_ms,omitempty"`
}

// The sandbox's defaults and caps.
const (
	DefaultSteps   = 1_000_000
	MaxSteps       = 100_000_000
	DefaultTimeout = 2 * time.Second
	MaxTimeout     = 30 * time.Second
	maxChildren    = 10_000
	maxBundleBytes = 1 << 20
)

// Result is what compose returns (as a Starlark dict).
type Result struct {
	Children []Child        `json:"children"`
	Edges    []Edge         `json:"edges,omitempty"`
	Status   map[string]any `json:"status,omitempty"`
}

// Child is one composed child.
type Child struct {
	Kind    string            `json:"kind"`
	Version string            `json:"version,omitempty"`
	Name    string            `json:"name"`
	Labels  map[string]string `json:"labels,omitempty"`
	Spec    map[string]any    `json:"spec,omitempty"`
}

// Edge orders the child named dependent after the child named
// dependency; flows maps dependency status pointers to dependent spec
// pointers.
type Edge struct {
	Dependent  string            `json:"dependent"`
	Dependency string            `json:"dependency"`
	Flows      map[string]string `json:"flows,omitempty"`
}

// Provider composes one (kind, version) with the Starlark program in its
// providerconfig bundle.
type Provider struct {
	kv  manifest.KindVersion
	log zerolog.Logger
}

// New returns a stdstarlark provider for kv.
func New(kv manifest.KindVersion, log zerolog.Logger) *Provider {
	if kv.Version == "" {
		kv.Version = manifest.DefaultVersion
	}
	return &Provider{kv: kv, log: log.With().Str("provider", "stdstarlark").Str("kind", kv.Kind).Str("version", kv.Version).Logger()}
}

// Kind is the (kind, version) served.
func (s *Provider) Kind() manifest.KindVersion { return s.kv }

// OnConfig is a no-op: every task reads its own effective config, so a
// resource may attach a bundle of its own.
func (*Provider) OnConfig(worker.ProviderConfig) {}

// Ready is always true: a bad bundle fails its composes, naming the error.
func (*Provider) Ready() bool { return true }

// Work composes (StageCompose) or rolls up (StageRollup).
func (s *Provider) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	switch req.Stage {
	case worker.StageCompose:
		out, err := s.compose(ctx, req)
		switch {
		case err != nil && ctx.Err() != nil:
			// The task's deadline (or its cancellation), not the program's
			// own limits: a run with more time may finish.
			return worker.Outcome{}, err
		case err != nil:
			return worker.Outcome{}, worker.Terminal(err)
		}
		return out, nil
	case worker.StageRollup:
		return Rollup(req), nil
	}
	return worker.Outcome{}, worker.Terminal(fmt.Errorf("stdstarlark: reaction %s at stage %s: a stdstarlark kind has only compose and rollup reactions", req.Reaction, req.Stage))
}

func limits(cfg worker.EffectiveConfig) (Limits, time.Duration, error) {
	var l Limits
	if len(cfg.Spec) > 0 && string(cfg.Spec) != "null" {
		// A misspelt field (max_step) is refused, not a silent default.
		dec := json.NewDecoder(bytes.NewReader(cfg.Spec))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			return l, 0, fmt.Errorf("providerconfig %q spec: %w", cfg.Name, err)
		}
	}
	if l.MaxSteps == 0 {
		l.MaxSteps = DefaultSteps
	}
	if l.MaxSteps > MaxSteps {
		return l, 0, fmt.Errorf("providerconfig %q: max_steps %d is above the cap of %d", cfg.Name, l.MaxSteps, MaxSteps)
	}
	if l.TimeoutMS < 0 || l.TimeoutMS > int(MaxTimeout.Milliseconds()) {
		return l, 0, fmt.Errorf("providerconfig %q: timeout_ms %d is outside 0..%d", cfg.Name, l.TimeoutMS, MaxTimeout.Milliseconds())
	}
	timeout := time.Duration(l.TimeoutMS) * time.Millisecond
	if l.TimeoutMS == 0 {
		timeout = DefaultTimeout
	}
	return l, timeout, nil
}

// bundle reads the providerconfig's data: file name → Starlark source.
func bundle(cfg worker.EffectiveConfig) (map[string]string, error) {
	if len(cfg.Data) > maxBundleBytes {
		return nil, fmt.Errorf("providerconfig %q: the bundle is %d bytes, at most %d", cfg.Name, len(cfg.Data), maxBundleBytes)
	}
	var files map[string]string
	if len(cfg.Data) > 0 && string(cfg.Data) != "null" {
		if err := json.Unmarshal(cfg.Data, &files); err != nil {
			return nil, fmt.Errorf("providerconfig %q data: want an object of file name → Starlark source: %w", cfg.Name, err)
		}
	}
	if _, ok := files[Entry]; !ok {
		return nil, fmt.Errorf("providerconfig %q: the bundle (its data) has no %s", cfg.Name, Entry)
	}
	return files, nil
}

var fileOptions = &syntax.FileOptions{Set: true, While: false, TopLevelControl: false, GlobalReassign: false, Recursion: false}

// Run runs compose(resource) from the bundle under the limits and
// returns its decoded result. An error names the file and line.
func Run(ctx context.Context, files map[string]string, resource map[string]any, maxSteps uint64,
	timeout time.Duration, printFn func(msg string)) (Result, error) {
	var res Result
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	thread := &starlark.Thread{Name: "stdstarlark", Print: func(_ *starlark.Thread, msg string) { printFn(msg) }}
	thread.SetMaxExecutionSteps(maxSteps)
	predeclared := guardedBuiltins()
	thread.Load = bundleLoader(files, predeclared)
	// Why the run was stopped: the time limit, or the task's own end (its
	// deadline, a cancellation) when that came first.
	stopped := func() string {
		if parent.Err() != nil {
			return "the task ended before the compose did (its deadline passed, or it was cancelled)"
		}
		return fmt.Sprintf("the time limit of %s is exceeded", timeout)
	}
	stop := context.AfterFunc(ctx, func() { thread.Cancel(stopped()) })
	defer stop()
	// A built-in runs to its end uncancelled: past the limit, its result is
	// not used.
	checked := func(err error) error {
		if err != nil {
			return starlarkErr(err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("starlark: %s", stopped())
		}
		return nil
	}
	globals, err := execFile(thread, Entry, files[Entry], predeclared)
	if err := checked(err); err != nil {
		return res, err
	}
	fn, ok := globals[ComposeFunc].(starlark.Callable)
	if !ok {
		return res, fmt.Errorf("%s defines no function %s(resource)", Entry, ComposeFunc)
	}
	arg, err := toStarlark(thread, resource)
	if err != nil {
		return res, err
	}
	v, err := starlark.Call(thread, fn, starlark.Tuple{arg}, nil)
	if err := checked(err); err != nil {
		return res, err
	}
	if _, isDict := v.(*starlark.Dict); !isDict {
		return res, fmt.Errorf("%s returned %s, want a dict with children (and optional edges and status)", ComposeFunc, v.Type())
	}
	doc, err := toGo(ctx, v)
	if ctx.Err() != nil {
		return res, fmt.Errorf("starlark: %s", stopped())
	}
	if err != nil {
		return res, fmt.Errorf("%s's result is not JSON: %w", ComposeFunc, err)
	}
	encoded, err := json.Marshal(doc)
	if err != nil {
		return res, fmt.Errorf("%s's result is not JSON: %w", ComposeFunc, err)
	}
	dec := json.NewDecoder(bytes.NewReader(encoded))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		return res, fmt.Errorf("%s's result: %w", ComposeFunc, err)
	}
	return res, nil
}

// toStarlark converts a JSON-shaped Go value with json.decode.
func toStarlark(thread *starlark.Thread, v any) (starlark.Value, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode the resource for Starlark: %w", err)
	}
	return starlark.Call(thread, starlarkjson.Module.Members["decode"], starlark.Tuple{starlark.String(b)}, nil)
}

// bundleLoader lets load() read only the bundle's own files, each once.
func bundleLoader(files map[string]string, predeclared starlark.StringDict) func(*starlark.Thread, string) (starlark.StringDict, error) {
	type entry struct {
		globals starlark.StringDict
		err     error
	}
	cache := map[string]*entry{}
	return func(thread *starlark.Thread, module string) (starlark.StringDict, error) {
		if e, ok := cache[module]; ok {
			if e == nil {
				return nil, fmt.Errorf("load(%q): a load cycle", module)
			}
			return e.globals, e.err
		}
		src, ok := files[module]
		if !ok {
			return nil, fmt.Errorf("load(%q): no such file in the bundle (load reads only the providerconfig's bundle)", module)
		}
		cache[module] = nil
		g, err := execFile(thread, module, src, predeclared)
		cache[module] = &entry{g, err}
		return g, err
	}
}

// execFile parses a bundle file, rewrites it so that no step can build a
// value past the sandbox's limits (rewrite), and runs it.
func execFile(thread *starlark.Thread, name, src string, predeclared starlark.StringDict) (starlark.StringDict, error) {
	f, err := fileOptions.Parse(name, src, 0)
	if err != nil {
		return nil, err
	}
	rewrite(f)
	prog, err := starlark.FileProgram(f, predeclared.Has)
	if err != nil {
		return nil, err
	}
	g, err := prog.Init(thread, predeclared)
	g.Freeze()
	return g, err
}

// starlarkErr keeps the Starlark backtrace (file:line:col of each frame).
func starlarkErr(err error) error {
	var ee *starlark.EvalError
	if errors.As(err, &ee) {
		return fmt.Errorf("starlark: %s", strings.TrimSpace(ee.Backtrace()))
	}
	return fmt.Errorf("starlark: %w", err)
}

func (s *Provider) compose(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	limits, timeout, err := limits(req.Config)
	if err != nil {
		return worker.Outcome{}, err
	}
	files, err := bundle(req.Config)
	if err != nil {
		return worker.Outcome{}, err
	}
	// No spec (a reaction that does not read it, or none given) is an
	// empty one, as for stdcel.
	spec := any(map[string]any{})
	if len(req.Resource.Spec) > 0 && string(req.Resource.Spec) != "null" {
		// Numbers as written: an int reaches the program with every digit
		// (as its result keeps them), not rounded through a float64.
		dec := json.NewDecoder(bytes.NewReader(req.Resource.Spec))
		dec.UseNumber()
		if err := dec.Decode(&spec); err != nil {
			return worker.Outcome{}, fmt.Errorf("spec: %w", err)
		}
	}
	labels := req.Resource.Labels
	if labels == nil {
		labels = map[string]string{}
	}
	resource := map[string]any{"name": req.Resource.Name, "labels": labels, "spec": spec, "generation": req.Resource.Generation}
	pr := &printer{log: s.log.With().Str("resource", req.Resource.Name).Logger()}
	res, err := Run(ctx, files, resource, limits.MaxSteps, timeout, pr.print)
	pr.done()
	if err != nil {
		return worker.Outcome{}, err
	}
	return toOutcome(req.Resource.Name, res)
}

// The most of one compose's print() output the worker logs: a program
// printing in a loop would otherwise write a log line per step (each up to
// MaxLen), flooding the worker's log.
const (
	MaxPrintLines = 100
	MaxPrintBytes = 64 << 10
)

// printer logs a compose's print() lines up to MaxPrintLines and
// MaxPrintBytes, and counts the rest.
type printer struct {
	log                   zerolog.Logger
	lines, bytes, dropped int
}

func (p *printer) print(msg string) {
	if p.lines >= MaxPrintLines || p.bytes+len(msg) > MaxPrintBytes {
		p.dropped++
		return
	}
	p.lines++
	p.bytes += len(msg)
	p.log.Info().Str("starlark_print", msg).Msg("stdstarlark print")
}

// done logs how many lines were dropped, if any.
func (p *printer) done() {
	if p.dropped > 0 {
		p.log.Warn().Int("dropped", p.dropped).Int("max_lines", MaxPrintLines).Int("max_bytes", MaxPrintBytes).
			Msg("stdstarlark print: lines past the limit of one compose were not logged")
	}
}

func toOutcome(root string, res Result) (worker.Outcome, error) {
	if len(res.Children) > maxChildren {
		return worker.Outcome{}, fmt.Errorf("compose returned %d children, at most %d", len(res.Children), maxChildren)
	}
	var out worker.Outcome
	byName := map[string]worker.Ref{}
	for i, c := range res.Children {
		if c.Kind == "" || c.Name == "" {
			return worker.Outcome{}, fmt.Errorf("compose: children[%d] needs a kind and a name", i)
		}
		if _, dup := byName[c.Name]; dup {
			return worker.Outcome{}, fmt.Errorf("compose: children[%d]: the name %q is used twice (edges name children)", i, c.Name)
		}
		byName[c.Name] = worker.Ref{Kind: c.Kind, Name: c.Name}
		spec := c.Spec
		if spec == nil {
			spec = map[string]any{}
		}
		if v, ok := c.Labels[OwnerLabel]; ok && v != root {
			return worker.Outcome{}, fmt.Errorf("compose: children[%d].labels: %q is set by stdstarlark to the composite's name (%q), not %q",
				i, OwnerLabel, root, v)
		}
		labels := map[string]string{OwnerLabel: root}
		for k, v := range c.Labels {
			labels[k] = v
		}
		out.Children = append(out.Children, worker.Child{Kind: c.Kind, Version: c.Version, Name: c.Name, Labels: labels, Spec: mustJSON(spec)})
	}
	for i, e := range res.Edges {
		dependent, ok1 := byName[e.Dependent]
		dependency, ok2 := byName[e.Dependency]
		if !ok1 || !ok2 {
			return worker.Outcome{}, fmt.Errorf("compose: edges[%d] (%s after %s) names a child compose did not return", i, e.Dependent, e.Dependency)
		}
		edge := worker.Edge{Dependent: dependent, Dependency: dependency}
		for src, dst := range e.Flows {
			edge.ValueFlows = append(edge.ValueFlows, worker.ValueFlow{SrcField: src, DepField: dst})
		}
		sort.Slice(edge.ValueFlows, func(i, j int) bool { return edge.ValueFlows[i].SrcField < edge.ValueFlows[j].SrcField })
		out.Edges = append(out.Edges, edge)
	}
	status := map[string]any{"phase": "composed", "resources": len(out.Children)}
	for k, v := range res.Status {
		status[k] = v
	}
	out.Status = mustJSON(status)
	return out, nil
}

// Rollup counts the settled subtree by kind and phase; the root is healthy
// when every resource below is Ready (otherwise a ChildrenNotReady
// condition says how many are not). The Starlark composer's rollup, and the
// data-driven demo's composites'.
func Rollup(req worker.Request) worker.Outcome {
	byKind := map[string]map[string]int{}
	ready := 0
	for _, c := range req.Children {
		if byKind[c.Kind] == nil {
			byKind[c.Kind] = map[string]int{}
		}
		byKind[c.Kind][c.Phase]++
		if c.Phase == "Ready" {
			ready++
		}
	}
	healthy := ready == len(req.Children)
	out := worker.Outcome{HealthOK: &healthy,
		Status: mustJSON(map[string]any{"phase": "rolled-up", "resources": len(req.Children), "ready": ready, "by_kind": byKind})}
	if !healthy {
		out.Conditions = []worker.Condition{{Type: "Ready", Status: "False", Reason: "ChildrenNotReady",
			Message: fmt.Sprintf("%d of %d resources not ready", len(req.Children)-ready, len(req.Children))}}
	}
	return out
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("stdstarlark: marshal a JSON-shaped value: %v", err))
	}
	return b
}
