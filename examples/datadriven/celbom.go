package datadriven

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"sync"

	"github.com/converge-run/converge/core/stdstarlark"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// CELRules is the celbom providerconfig spec: the rules the fixed fan-out
// applies to every team, in order.
type CELRules struct {
	Rules []CELRule `json:"rules"`
}

// CELRule is one child a team may get.
type CELRule struct {
	// Name names the child: <root>-<team.name>-<name>.
	Name string `json:"name"`
	Kind string `json:"kind"`
	// Version is the child's kind version ("" = v1).
	Version string `json:"version,omitempty"`
	// When is a CEL expression of type bool over team, spec and root: the
	// team gets this child only when it is true.
	When string `json:"when"`
	// Spec is the child's static spec; "team" is always set to the team's
	// name.
	Spec map[string]any `json:"spec,omitempty"`
	// Set computes spec fields: field name → CEL expression (any type).
	Set map[string]string `json:"set,omitempty"`
	// Needs orders the child after earlier rules' children of the same team
	// and flows their status fields into its spec.
	Needs []CELNeed `json:"needs,omitempty"`
}

// CELNeed is one dependency of a rule's child.
type CELNeed struct {
	Rule string `json:"rule"`
	// Flows maps a JSON pointer into the dependency's status to a JSON
	// pointer into this child's spec.
	Flows map[string]string `json:"flows,omitempty"`
}

// CELBOMSpec is a celbom's spec: the teams the rules fan out over. A team
// is any JSON object with a name; its other fields are what rules test.
type CELBOMSpec struct {
	Teams []map[string]any `json:"teams"`
}

// Limits on a celbom's rules and their evaluation.
const (
	maxRules     = 64
	maxTeams     = 1000
	celCostLimit = 10_000 // per expression evaluation
)

var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// celBOM composes by CEL rules: a fixed Go loop over teams × rules; each
// rule's when predicate decides whether the team gets the child.
type celBOM struct {
	env *cel.Env

	mu    sync.Mutex
	progs map[string]cel.Program // compiled expressions, by source
}

func newCELBOM() *celBOM {
	env, err := cel.NewEnv(
		cel.Variable("team", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("spec", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("root", cel.StringType),
	)
	if err != nil {
		panic(fmt.Sprintf("celbom: the CEL environment: %v", err)) // static declarations
	}
	return &celBOM{env: env, progs: map[string]cel.Program{}}
}

func (*celBOM) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: KindCELBOM, Version: manifest.DefaultVersion}
}
func (*celBOM) OnConfig(worker.ProviderConfig) {}
func (*celBOM) Ready() bool                    { return true }

func (b *celBOM) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	switch req.Stage {
	case worker.StageCompose:
		out, err := b.compose(ctx, req)
		if err != nil {
			return worker.Outcome{}, worker.Terminal(err)
		}
		return out, nil
	case worker.StageRollup:
		return stdstarlark.Rollup(req), nil
	}
	return worker.Outcome{}, worker.Terminal(fmt.Errorf("celbom: unexpected stage %s", req.Stage))
}

// program compiles src (cached by source); wantBool checks the type.
func (b *celBOM) program(src string, wantBool bool) (cel.Program, error) {
	key := fmt.Sprint(wantBool, ":", src)
	b.mu.Lock()
	p, ok := b.progs[key]
	b.mu.Unlock()
	if ok {
		return p, nil
	}
	ast, iss := b.env.Compile(src)
	if iss.Err() != nil {
		return nil, iss.Err()
	}
	if wantBool && ast.OutputType() != cel.BoolType && ast.OutputType() != cel.DynType {
		return nil, fmt.Errorf("is of type %s, want bool", ast.OutputType())
	}
	p, err := b.env.Program(ast, cel.CostLimit(celCostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, err
	}
	b.mu.Lock()
	if len(b.progs) > 4096 { // edited rules leave old sources behind
		b.progs = map[string]cel.Program{}
	}
	b.progs[key] = p
	b.mu.Unlock()
	return p, nil
}

type compiledRule struct {
	CELRule
	when cel.Program
	set  map[string]cel.Program
}

// rules decodes and compiles the config's rules, naming the first bad one.
func (b *celBOM) rules(cfg worker.EffectiveConfig) ([]compiledRule, error) {
	var doc CELRules
	if len(cfg.Spec) == 0 || string(cfg.Spec) == "null" {
		return nil, errors.New("celbom: no rules: its providerconfig spec has none")
	}
	if err := json.Unmarshal(cfg.Spec, &doc); err != nil {
		return nil, fmt.Errorf("providerconfig %q: %w", cfg.Name, err)
	}
	if len(doc.Rules) > maxRules {
		return nil, fmt.Errorf("providerconfig %q: %d rules, at most %d", cfg.Name, len(doc.Rules), maxRules)
	}
	seen := map[string]bool{}
	out := make([]compiledRule, 0, len(doc.Rules))
	for i, r := range doc.Rules {
		at := fmt.Sprintf("providerconfig %q rules[%d] (%s)", cfg.Name, i, r.Name)
		if !nameRE.MatchString(r.Name) || seen[r.Name] {
			return nil, fmt.Errorf("%s: name must be a unique lower-case DNS label of at most 32 characters", at)
		}
		if r.Kind == "" {
			return nil, fmt.Errorf("%s: kind is empty", at)
		}
		for _, n := range r.Needs {
			if !seen[n.Rule] {
				return nil, fmt.Errorf("%s: needs %q, which is not an earlier rule (needs point backwards, so the rules form a DAG)", at, n.Rule)
			}
		}
		seen[r.Name] = true
		if r.When == "" {
			r.When = "true"
		}
		c := compiledRule{CELRule: r, set: map[string]cel.Program{}}
		var err error
		if c.when, err = b.program(r.When, true); err != nil {
			return nil, fmt.Errorf("%s: when %q: %w", at, r.When, err)
		}
		for field, src := range r.Set {
			if c.set[field], err = b.program(src, false); err != nil {
				return nil, fmt.Errorf("%s: set.%s %q: %w", at, field, src, err)
			}
		}
		out = append(out, c)
	}
	return out, nil
}

func (b *celBOM) compose(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	rules, err := b.rules(req.Config)
	if err != nil {
		return worker.Outcome{}, err
	}
	var spec CELBOMSpec
	var specMap map[string]any
	if err := json.Unmarshal(req.Resource.Spec, &spec); err != nil {
		return worker.Outcome{}, fmt.Errorf("spec: %w", err)
	}
	if err := json.Unmarshal(req.Resource.Spec, &specMap); err != nil {
		return worker.Outcome{}, fmt.Errorf("spec: %w", err)
	}
	if len(spec.Teams) > maxTeams {
		return worker.Outcome{}, fmt.Errorf("spec.teams: %d teams, at most %d", len(spec.Teams), maxTeams)
	}
	root := req.Resource.Name
	var out worker.Outcome
	counts := map[string]int{}
	for ti, team := range spec.Teams {
		name, _ := team["name"].(string)
		if !nameRE.MatchString(name) {
			return worker.Outcome{}, fmt.Errorf("spec.teams[%d].name %q: want a lower-case DNS label of at most 32 characters", ti, name)
		}
		vars := map[string]any{"team": team, "spec": specMap, "root": root}
		emitted := map[string]worker.Ref{}
		for _, r := range rules {
			child, ok, err := r.child(ctx, vars, root, name)
			if err != nil {
				return worker.Outcome{}, fmt.Errorf("team %q: %w", name, err)
			}
			if !ok {
				continue
			}
			out.Children = append(out.Children, child)
			ref := worker.Ref{Kind: child.Kind, Name: child.Name}
			emitted[r.Name] = ref
			counts[r.Name]++
			out.Edges = append(out.Edges, r.edges(ref, emitted)...)
		}
	}
	out.Status = mustJSON(map[string]any{"phase": "composed", "teams": len(spec.Teams), "resources": len(out.Children),
		"by_rule": counts, "rules_config": req.Config.Name})
	return out, nil
}

// child evaluates the rule for one team: whether it applies, and its spec.
func (r compiledRule) child(ctx context.Context, vars map[string]any, root, team string) (worker.Child, bool, error) {
	v, _, err := r.when.ContextEval(ctx, vars)
	if err != nil {
		return worker.Child{}, false, fmt.Errorf("rule %s: when %q: %w", r.Name, r.When, err)
	}
	on, isBool := v.(types.Bool)
	if !isBool {
		return worker.Child{}, false, fmt.Errorf("rule %s: when %q gave %v (%s), want a bool", r.Name, r.When, v, v.Type())
	}
	if !bool(on) {
		return worker.Child{}, false, nil
	}
	spec := map[string]any{}
	for k, val := range r.Spec {
		spec[k] = val
	}
	spec["team"] = team
	for field, p := range r.set {
		v, _, err := p.ContextEval(ctx, vars)
		if err != nil {
			return worker.Child{}, false, fmt.Errorf("rule %s: set.%s %q: %w", r.Name, field, r.Set[field], err)
		}
		native, err := v.ConvertToNative(types.JSONValueType)
		if err != nil {
			return worker.Child{}, false, fmt.Errorf("rule %s: set.%s %q gave %v, not a JSON value: %w", r.Name, field, r.Set[field], v, err)
		}
		jv, isJSON := native.(*structpb.Value)
		if !isJSON {
			return worker.Child{}, false, fmt.Errorf("rule %s: set.%s %q gave %v, not a JSON value", r.Name, field, r.Set[field], v)
		}
		spec[field] = jv.AsInterface()
	}
	return worker.Child{Kind: r.Kind, Version: r.Version, Name: root + "-" + team + "-" + r.Name,
		Labels: map[string]string{"celbom": root, "team": team, "rule": r.Name}, Spec: mustJSON(spec)}, true, nil
}

// edges orders ref after the children of the rules it needs that this team
// got; a need whose rule's when was false for the team is skipped.
func (r compiledRule) edges(ref worker.Ref, emitted map[string]worker.Ref) []worker.Edge {
	var out []worker.Edge
	for _, n := range r.Needs {
		dep, ok := emitted[n.Rule]
		if !ok {
			continue
		}
		e := worker.Edge{Dependent: ref, Dependency: dep}
		for src, dst := range n.Flows {
			e.ValueFlows = append(e.ValueFlows, worker.ValueFlow{SrcField: src, DepField: dst})
		}
		sort.Slice(e.ValueFlows, func(i, j int) bool { return e.ValueFlows[i].SrcField < e.ValueFlows[j].SrcField })
		out = append(out, e)
	}
	return out
}
