package stdcel

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/common/types/ref"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/converge-run/converge/core/worker"
)

// eval evaluates a compiled template. A flow leaf is left out of an object
// (the core sets it) and is null in a list.
func (v *value) eval(ctx context.Context, vars map[string]any, b *budget) (any, error) {
	switch {
	case v.flow:
		return nil, nil
	case v.obj != nil:
		out := make(map[string]any, len(v.obj))
		for _, k := range slices.Sorted(maps.Keys(v.obj)) { // the first error is always the same one
			e := v.obj[k]
			if e.flow {
				continue
			}
			x, err := e.eval(ctx, vars, b)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", k, err)
			}
			out[k] = x
		}
		return out, nil
	case v.arr != nil:
		out := make([]any, len(v.arr))
		for i, e := range v.arr {
			x, err := e.eval(ctx, vars, b)
			if err != nil {
				return nil, fmt.Errorf("[%d]: %w", i, err)
			}
			out[i] = x
		}
		return out, nil
	case v.segs != nil:
		return v.evalString(ctx, vars, b)
	}
	return v.lit, nil
}

// evalString: one expression alone gives its value (of any type); with
// text around it, every expression is rendered into the string.
func (v *value) evalString(ctx context.Context, vars map[string]any, bud *budget) (any, error) {
	if len(v.segs) == 1 && v.segs[0].prog != nil {
		return run(ctx, v.segs[0], vars, bud)
	}
	var b strings.Builder
	for _, s := range v.segs {
		if s.prog == nil {
			b.WriteString(s.text)
			continue
		}
		x, err := run(ctx, s, vars, bud)
		if err != nil {
			return nil, err
		}
		if str, ok := x.(string); ok {
			b.WriteString(str)
			continue
		}
		j, err := json.Marshal(x)
		if err != nil {
			return nil, fmt.Errorf("${%s}: %w", s.text, err)
		}
		b.Write(j)
	}
	return b.String(), nil
}

func run(ctx context.Context, s compiled, vars map[string]any, b *budget) (any, error) {
	out, _, err := s.prog.ContextEval(ctx, vars)
	if err != nil {
		return nil, fmt.Errorf("${%s}: %w", s.text, err)
	}
	v, err := toJSON(s.text, out)
	if err != nil {
		return nil, err
	}
	if err := b.spend(v); err != nil {
		return nil, fmt.Errorf("${%s}: %w", s.text, err)
	}
	return v, nil
}

// budget is what is left of MaxResultBytes for the values one composition
// (or one status projection) evaluates. The cost limit bounds the work of
// an expression, not the size of its value: a list repeating one long
// string is cheap to make and small in memory, but not as JSON.
type budget struct{ left int }

func newBudget() *budget { return &budget{left: MaxResultBytes} }

// spend counts v's JSON size against the budget, walking no further than
// the budget allows.
func (b *budget) spend(v any) error {
	n, ok := jsonSize(v, b.left)
	if !ok {
		return fmt.Errorf("the values evaluated would be more than %d bytes of JSON (MaxResultBytes)", MaxResultBytes)
	}
	b.left -= n
	return nil
}

// jsonSize is (at least) the JSON size of a JSON-shaped value, or false once
// it passes limit.
func jsonSize(v any, limit int) (int, bool) {
	n := 0
	var walk func(v any) bool
	walk = func(v any) bool {
		switch x := v.(type) {
		case string:
			n += len(x) + 2
		case map[string]any:
			n += 2
			for k, e := range x {
				if n += len(k) + 4; n > limit || !walk(e) {
					return false
				}
			}
		case []any:
			n += 2 + len(x)
			for _, e := range x {
				if n > limit || !walk(e) {
					return false
				}
			}
		default:
			n += 24
		}
		return n <= limit
	}
	ok := walk(v)
	return n, ok
}

func toJSON(src string, v ref.Val) (any, error) {
	native, err := v.ConvertToNative(types.JSONValueType)
	if err != nil {
		return nil, fmt.Errorf("${%s} gave %v, not a JSON value: %w", src, v, err)
	}
	jv, ok := native.(*structpb.Value)
	if !ok {
		return nil, fmt.Errorf("${%s} gave %v, not a JSON value", src, v)
	}
	return jv.AsInterface(), nil
}

// Composite is the resource the graph is instantiated for.
type Composite struct {
	Name   string
	Labels map[string]string
	Spec   json.RawMessage
}

func (c Composite) vars() (map[string]any, error) {
	var spec any = map[string]any{}
	if len(c.Spec) > 0 && string(c.Spec) != "null" {
		if err := json.Unmarshal(c.Spec, &spec); err != nil {
			return nil, fmt.Errorf("spec: %w", err)
		}
	}
	labels := map[string]any{}
	for k, v := range c.Labels {
		labels[k] = v
	}
	return map[string]any{SchemaVar: map[string]any{"name": c.Name, "labels": labels, "spec": spec}}, nil
}

// Children instantiates the graph for a composite: its children, in
// dependency order, and the edges between them with their value flows.
func (p *Plan) Children(ctx context.Context, c Composite) ([]worker.Child, []worker.Edge, error) {
	vars, err := c.vars()
	if err != nil {
		return nil, nil, err
	}
	refs := map[string]worker.Ref{}
	var children []worker.Child
	b := newBudget()
	for _, n := range p.nodes {
		child, self, err := n.instantiate(ctx, c.Name, vars, b)
		if err != nil {
			return nil, nil, fmt.Errorf("resource %s: %w", n.t.ID, err)
		}
		vars[n.t.ID] = self
		refs[n.t.ID] = worker.Ref{Kind: child.Kind, Name: child.Name}
		children = append(children, child)
	}
	var edges []worker.Edge
	for _, n := range p.nodes {
		deps := make([]string, 0, len(n.deps))
		for d := range n.deps {
			deps = append(deps, d)
		}
		sort.Strings(deps)
		for _, d := range deps {
			flows := append([]worker.ValueFlow(nil), n.flows[d]...)
			sort.Slice(flows, func(i, j int) bool { return flows[i].DepField < flows[j].DepField })
			edges = append(edges, worker.Edge{Dependent: refs[n.t.ID], Dependency: refs[d], ValueFlows: flows})
		}
	}
	return children, edges, nil
}

// instantiate evaluates one node; self is what later nodes' expressions
// see of it.
func (n *node) instantiate(ctx context.Context, root string, vars map[string]any, bud *budget) (worker.Child, map[string]any, error) {
	nameV, err := n.name.eval(ctx, vars, bud)
	if err != nil {
		return worker.Child{}, nil, fmt.Errorf("name: %w", err)
	}
	name, ok := nameV.(string)
	if !ok || name == "" {
		return worker.Child{}, nil, fmt.Errorf("name: gave %v, want a non-empty string", nameV)
	}
	labels := map[string]string{OwnerLabel: root, IDLabel: strings.ReplaceAll(n.t.ID, "_", "-")}
	selfLabels := map[string]any{}
	for _, k := range slices.Sorted(maps.Keys(n.labels)) {
		x, err := n.labels[k].eval(ctx, vars, bud)
		if err != nil {
			return worker.Child{}, nil, fmt.Errorf("labels.%s: %w", k, err)
		}
		s, ok := x.(string)
		if !ok {
			return worker.Child{}, nil, fmt.Errorf("labels.%s: gave %v, want a string", k, x)
		}
		labels[k] = s
	}
	for k, v := range labels {
		selfLabels[k] = v
	}
	spec, err := n.spec.eval(ctx, vars, bud)
	if err != nil {
		return worker.Child{}, nil, fmt.Errorf("spec.%w", err)
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return worker.Child{}, nil, fmt.Errorf("spec: %w", err)
	}
	child := worker.Child{Kind: n.t.Kind, Version: n.t.Version, Name: name, Labels: labels, Spec: b, ProviderConfigRef: n.t.ProviderConfigRef}
	return child, map[string]any{"kind": n.t.Kind, "name": name, "labels": selfLabels, "spec": spec}, nil
}

// Observed is a child as the rollup sees it.
type Observed struct {
	Phase  string
	Status json.RawMessage
}

// FieldError is a status field whose expression failed for a reason other
// than a missing input: a type error, a division by zero, the cost limit,
// MaxResultBytes.
type FieldError struct {
	Field string
	Err   error
}

// StatusResult is the status projection evaluated: the fields that
// evaluated, those still waiting for an input (sorted) and those that
// failed (sorted by field).
type StatusResult struct {
	Fields     map[string]any
	Unresolved []string
	Failed     []FieldError
}

// missingInputs are CEL's messages for a value that is not there (yet): a
// map key, a field, an attribute or a list index. Only these leave a field
// unresolved; any other error is the expression's own.
var missingInputs = []string{"no such key", "no such attribute", "no such field", "index out of bounds", "out of range in list size"}

func missingInput(err error) bool {
	for _, m := range missingInputs {
		if strings.Contains(err.Error(), m) {
			return true
		}
	}
	return false
}

// Status evaluates the graph's status projection over the observed
// children (by id). A field whose inputs are not there yet (a child without
// that status field) is left out and named in Unresolved; one whose
// expression fails otherwise is left out and named, with the error, in
// Failed.
func (p *Plan) Status(ctx context.Context, c Composite, seen map[string]Observed, names map[string]string) (StatusResult, error) {
	res := StatusResult{Fields: map[string]any{}}
	if p.status == nil {
		return res, nil
	}
	vars, err := c.vars()
	if err != nil {
		return res, err
	}
	for id := range p.byID {
		o := seen[id]
		var status any = map[string]any{}
		if len(o.Status) > 0 && string(o.Status) != "null" {
			if err := json.Unmarshal(o.Status, &status); err != nil {
				return res, fmt.Errorf("%s's status: %w", id, err)
			}
		}
		vars[id] = map[string]any{"name": names[id], "phase": o.Phase, "status": status}
	}
	b := newBudget()
	for _, k := range slices.Sorted(maps.Keys(p.status.obj)) { // MaxResultBytes runs out at the same field
		x, err := p.status.obj[k].eval(ctx, vars, b)
		switch {
		case err == nil:
			res.Fields[k] = x
		case missingInput(err):
			res.Unresolved = append(res.Unresolved, k)
		default:
			res.Failed = append(res.Failed, FieldError{Field: k, Err: err})
		}
	}
	sort.Strings(res.Unresolved)
	sort.Slice(res.Failed, func(i, j int) bool { return res.Failed[i].Field < res.Failed[j].Field })
	return res, nil
}
