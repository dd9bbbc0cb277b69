package stdcel

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/operators"
	"cel.dev/cel-go/common/types"

	"github.com/converge-run/converge/core/worker"
)

// Bounds of a graph.
const (
	MaxResources = 256
	// CostLimit bounds one expression evaluation.
	CostLimit = 100_000
	// MaxResultBytes bounds the values one composition's expressions (or
	// one status projection's) evaluate to, as JSON: as much as a stdio
	// program may write on stdout.
	MaxResultBytes = 64 << 20
)

// SchemaVar is the variable naming the composite itself: schema.name,
// schema.labels, schema.spec (as in kro).
const SchemaVar = "schema"

var idRE = regexp.MustCompile(`^[a-z][a-z0-9_]{0,62}$`)

// celReserved are CEL's reserved words and type names: not usable as ids.
var celReserved = map[string]bool{"in": true, "as": true, "break": true, "const": true, "continue": true, "else": true,
	"for": true, "function": true, "if": true, "import": true, "let": true, "loop": true, "package": true, "namespace": true,
	"return": true, "var": true, "void": true, "while": true, "true": true, "false": true, "null": true, "int": true,
	"uint": true, "double": true, "bool": true, "string": true, "bytes": true, "list": true, "map": true, "type": true,
	"null_type": true, "dyn": true}

// resourceFields are what an expression may read of another resource.
var resourceFields = map[string]bool{"kind": true, "name": true, "labels": true, "spec": true, "status": true}

// Graph is a stdcel providerconfig spec: the composite's resource
// templates and its status projection.
type Graph struct {
	Resources []Template `json:"resources"`
	// Status maps status fields of the composite to templates over its
	// resources (id.status…, id.phase, id.name) and schema, evaluated at
	// rollup.
	Status map[string]any `json:"status,omitempty"`
}

// Template is one resource of the graph.
type Template struct {
	// ID names the resource in expressions: a lower-case CEL identifier.
	ID      string `json:"id"`
	Kind    string `json:"kind"`
	Version string `json:"version,omitempty"`
	// Name is a template for the child's name (default
	// "${schema.name}-<id>", underscores as hyphens).
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// Spec is the child's spec: any JSON, its strings templates.
	Spec any `json:"spec,omitempty"`
	// DependsOn orders this resource after others without a value flow.
	DependsOn         []string `json:"depends_on,omitempty"`
	ProviderConfigRef string   `json:"provider_config_ref,omitempty"`
}

// Plan is a checked, compiled graph.
type Plan struct {
	nodes  []*node // in dependency order
	byID   map[string]*node
	status *value
}

type node struct {
	t      Template
	name   *value
	labels map[string]*value
	spec   *value
	// deps are the ids this node waits for; flows the values copied from
	// each of them.
	deps  map[string]bool
	flows map[string][]worker.ValueFlow
}

// value is a compiled template: a literal, an object, a list, a string of
// segments, or a flow leaf (a value the core copies from another resource's
// status, absent at compose time).
type value struct {
	lit  any
	obj  map[string]*value
	arr  []*value
	segs []compiled
	flow bool
}

type compiled struct {
	text string
	prog cel.Program // nil for literal text
}

// The labels every child gets: the composite's name and the child's
// resource id ("_" as "-"). A template may not set them.
const (
	OwnerLabel = "stdcel"
	IDLabel    = "stdcel-id"
)

// Compile checks a graph and compiles its expressions. Every reference
// between resources becomes a dependency; a whole-value reference to
// another resource's status (${vpc.status.vpc_id}) a value flow. Unknown
// references, a computation over another resource's status, and cycles
// are refused, naming where.
func Compile(g Graph) (*Plan, error) {
	if len(g.Resources) == 0 {
		return nil, errors.New("the graph has no resources")
	}
	if len(g.Resources) > MaxResources {
		return nil, fmt.Errorf("the graph has %d resources, at most %d", len(g.Resources), MaxResources)
	}
	ids := map[string]bool{}
	for i, t := range g.Resources {
		switch {
		case !idRE.MatchString(t.ID) || t.ID == SchemaVar || celReserved[t.ID]:
			return nil, fmt.Errorf("resources[%d]: id %q must be a lower-case identifier ([a-z][a-z0-9_]*, at most 63), not %q and not a CEL reserved word or type name",
				i, t.ID, SchemaVar)
		case ids[t.ID]:
			return nil, fmt.Errorf("resources[%d]: id %q is used twice", i, t.ID)
		case t.Kind == "":
			return nil, fmt.Errorf("resources[%d] (%s): kind is empty", i, t.ID)
		}
		ids[t.ID] = true
	}
	c, err := newCompiler(ids)
	if err != nil {
		return nil, err
	}
	p := &Plan{byID: map[string]*node{}}
	var nodes []*node
	for i, t := range g.Resources {
		n, err := c.node(t)
		if err != nil {
			return nil, fmt.Errorf("resources[%d] (%s): %w", i, t.ID, err)
		}
		nodes = append(nodes, n)
		p.byID[t.ID] = n
	}
	if p.nodes, err = order(nodes, p.byID); err != nil {
		return nil, err
	}
	if g.Status != nil {
		rc := c.rollupCompiler()
		if p.status, err = rc.value(g.Status, "", ""); err != nil {
			return nil, fmt.Errorf("status: %w", err)
		}
	}
	return p, nil
}

type compiler struct {
	env *cel.Env
	ids map[string]bool
	// rollup compiles status templates: any expression over resources.
	rollup bool
	// cur is the node being compiled.
	cur *node
}

func newCompiler(ids map[string]bool) (*compiler, error) {
	opts := []cel.EnvOption{cel.Variable(SchemaVar, cel.DynType)}
	for id := range ids {
		opts = append(opts, cel.Variable(id, cel.DynType))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("the CEL environment: %w", err)
	}
	return &compiler{env: env, ids: ids}, nil
}

func (c *compiler) rollupCompiler() *compiler { return &compiler{env: c.env, ids: c.ids, rollup: true} }

func (c *compiler) node(t Template) (*node, error) {
	n := &node{t: t, labels: map[string]*value{}, deps: map[string]bool{}, flows: map[string][]worker.ValueFlow{}}
	c.cur = n
	name := t.Name
	if name == "" {
		name = "${" + SchemaVar + ".name}-" + strings.ReplaceAll(t.ID, "_", "-")
	}
	var err error
	if n.name, err = c.value(name, "", "name"); err != nil {
		return nil, err
	}
	for _, k := range slices.Sorted(maps.Keys(t.Labels)) { // the first error is always the same one
		v := t.Labels[k]
		if k == OwnerLabel || k == IDLabel {
			return nil, fmt.Errorf("labels.%s: stdcel sets it on every child (%s: the composite's name, %s: the resource id); a template may not", k, OwnerLabel, IDLabel)
		}
		if n.labels[k], err = c.value(v, "", "labels."+k); err != nil {
			return nil, err
		}
	}
	spec := t.Spec
	if spec == nil {
		spec = map[string]any{}
	}
	if _, isObj := spec.(map[string]any); !isObj {
		return nil, errors.New("spec must be an object")
	}
	if n.spec, err = c.value(spec, "", "spec"); err != nil {
		return nil, err
	}
	for _, d := range t.DependsOn {
		if !c.ids[d] {
			return nil, fmt.Errorf("depends_on: unknown resource %q (known: %s)", d, known(c.ids))
		}
		n.deps[d] = true
	}
	return n, nil
}

// value compiles the template v found at where; ptr is its JSON pointer
// inside the spec ("" outside it: name, labels, status), where a flow may
// land.
func (c *compiler) value(v any, ptr, where string) (*value, error) {
	switch x := v.(type) {
	case map[string]any:
		out := &value{obj: map[string]*value{}}
		for _, k := range slices.Sorted(maps.Keys(x)) { // the first error is always the same one
			e := x[k]
			cv, err := c.value(e, pointer(ptr, k), where+"."+k)
			if err != nil {
				return nil, err
			}
			out.obj[k] = cv
		}
		return out, nil
	case []any:
		out := &value{arr: make([]*value, len(x))}
		for i, e := range x {
			cv, err := c.value(e, indexPointer(ptr, i), fmt.Sprintf("%s[%d]", where, i))
			if err != nil {
				return nil, err
			}
			out.arr[i] = cv
		}
		return out, nil
	case string:
		return c.str(x, ptr, where)
	}
	return &value{lit: v}, nil
}

func (c *compiler) str(s, ptr, where string) (*value, error) {
	segs, err := scan(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	out := &value{}
	for _, sg := range segs {
		if !sg.expr {
			out.segs = append(out.segs, compiled{text: sg.text})
			continue
		}
		prog, flow, err := c.expr(sg.text, ptr, where, len(segs) == 1)
		if err != nil {
			return nil, fmt.Errorf("%s: ${%s}: %w", where, sg.text, err)
		}
		if flow {
			out.flow = true
			return out, nil
		}
		out.segs = append(out.segs, compiled{text: sg.text, prog: prog})
	}
	return out, nil
}

// expr compiles one expression and records what it references. flow is
// true when it is a whole-value reference to another resource's status,
// recorded as a value flow into ptr.
func (c *compiler) expr(src, ptr, where string, whole bool) (cel.Program, bool, error) {
	checked, iss := c.env.Compile(src)
	if iss.Err() != nil {
		return nil, false, fmt.Errorf("%w (known references: %s)", iss.Err(), known(c.ids))
	}
	native := checked.NativeRep()
	refs := native.ReferenceMap()
	bound := map[int64]bool{}
	boundIdents(native.Expr(), nil, bound)
	resID := func(e ast.Expr) string {
		if e.Kind() != ast.IdentKind || bound[e.ID()] {
			return ""
		}
		if r, ok := refs[e.ID()]; ok && c.ids[r.Name] {
			return r.Name
		}
		return ""
	}
	if c.rollup {
		return c.program(checked)
	}
	if id, path, ok := statusPath(native.Expr(), resID); ok {
		switch {
		case id == c.cur.t.ID:
			return nil, false, errors.New("a resource cannot read its own status")
		case ptr == "" || !strings.HasPrefix(where, "spec"):
			return nil, false, fmt.Errorf("another resource's status is known only after it converges: it may flow into a spec, not into %s", where)
		case !whole:
			return nil, false, fmt.Errorf("%s.status flows as a copy, so the reference must be the whole value (\"${%s}\"), not part of a string", id, src)
		}
		c.cur.deps[id] = true
		c.cur.flows[id] = append(c.cur.flows[id], worker.ValueFlow{SrcField: path, DepField: ptr})
		return nil, true, nil
	}
	var bad error
	ast.PreOrderVisit(native.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if bad != nil {
			return
		}
		if e.Kind() == ast.SelectKind {
			if id := resID(e.AsSelect().Operand()); id != "" {
				f := e.AsSelect().FieldName()
				switch {
				case !resourceFields[f]:
					bad = fmt.Errorf("%s.%s: a resource has kind, name, labels, spec and status", id, f)
				case f == "status":
					bad = fmt.Errorf("%s.status is known only after %s converges and flows as a copy: use the whole value ${%s.status.<field>} in a spec, no computation over it", id, id, id)
				}
			}
		}
		if id := resID(e); id != "" {
			if id == c.cur.t.ID {
				bad = errors.New("a resource cannot refer to itself")
			}
			c.cur.deps[id] = true
		}
	}))
	if bad != nil {
		return nil, false, bad
	}
	p, _, err := c.program(checked)
	return p, false, err
}

// boundIdents records in out the identifiers of e that name a variable a
// comprehension (a macro such as map, filter, exists) binds where they
// stand: tags.map(vpc, vpc + "-x") reads no resource vpc.
func boundIdents(e ast.Expr, scope []string, out map[int64]bool) {
	switch e.Kind() {
	case ast.IdentKind:
		if slices.Contains(scope, e.AsIdent()) {
			out[e.ID()] = true
		}
	case ast.SelectKind:
		boundIdents(e.AsSelect().Operand(), scope, out)
	case ast.CallKind:
		call := e.AsCall()
		if call.IsMemberFunction() {
			boundIdents(call.Target(), scope, out)
		}
		for _, a := range call.Args() {
			boundIdents(a, scope, out)
		}
	case ast.ListKind:
		for _, el := range e.AsList().Elements() {
			boundIdents(el, scope, out)
		}
	case ast.MapKind:
		for _, en := range e.AsMap().Entries() {
			boundIdents(en.AsMapEntry().Key(), scope, out)
			boundIdents(en.AsMapEntry().Value(), scope, out)
		}
	case ast.StructKind:
		for _, f := range e.AsStruct().Fields() {
			boundIdents(f.AsStructField().Value(), scope, out)
		}
	case ast.ComprehensionKind:
		comp := e.AsComprehension()
		boundIdents(comp.IterRange(), scope, out)
		boundIdents(comp.AccuInit(), scope, out)
		inner := append(slices.Clip(scope), comp.IterVar(), comp.AccuVar())
		if comp.HasIterVar2() {
			inner = append(inner, comp.IterVar2())
		}
		boundIdents(comp.LoopCondition(), inner, out)
		boundIdents(comp.LoopStep(), inner, out)
		boundIdents(comp.Result(), inner, out)
	}
}

func (c *compiler) program(checked *cel.Ast) (cel.Program, bool, error) {
	p, err := c.env.Program(checked, cel.CostLimit(CostLimit), cel.InterruptCheckFrequency(100))
	if err != nil {
		return nil, false, err
	}
	return p, false, nil
}

// statusPath matches id.status.a.b (or id.status["a"][0]) and returns the
// JSON pointer /a/b into id's status.
func statusPath(e ast.Expr, resID func(ast.Expr) string) (string, string, bool) {
	var tokens []string
walk:
	for {
		switch e.Kind() {
		case ast.SelectKind:
			s := e.AsSelect()
			if s.IsTestOnly() {
				return "", "", false
			}
			tokens = append(tokens, s.FieldName())
			e = s.Operand()
			continue
		case ast.CallKind:
			call := e.AsCall()
			if call.FunctionName() != operators.Index || len(call.Args()) != 2 || call.Args()[1].Kind() != ast.LiteralKind {
				return "", "", false
			}
			switch lit := call.Args()[1].AsLiteral().(type) {
			case types.String:
				tokens = append(tokens, string(lit))
			case types.Int:
				tokens = append(tokens, fmt.Sprint(int64(lit)))
			default:
				return "", "", false
			}
			e = call.Args()[0]
			continue
		}
		break walk
	}
	id := resID(e)
	if id == "" || len(tokens) < 2 || tokens[len(tokens)-1] != "status" {
		return "", "", false
	}
	ptr := ""
	for i := len(tokens) - 2; i >= 0; i-- {
		ptr = pointer(ptr, tokens[i])
	}
	return id, ptr, true
}

// order sorts the nodes so every node follows its dependencies, or names a
// cycle.
func order(nodes []*node, byID map[string]*node) ([]*node, error) {
	const (
		unseen = iota
		active
		done
	)
	state := map[string]int{}
	var out []*node
	var stack []string
	var visit func(n *node) error
	visit = func(n *node) error {
		switch state[n.t.ID] {
		case done:
			return nil
		case active:
			i := len(stack) - 1
			for stack[i] != n.t.ID {
				i--
			}
			return fmt.Errorf("the resources form a cycle: %s → %s (each needs the next); a graph must be acyclic",
				strings.Join(stack[i:], " → "), n.t.ID)
		}
		state[n.t.ID] = active
		stack = append(stack, n.t.ID)
		deps := make([]string, 0, len(n.deps))
		for d := range n.deps {
			deps = append(deps, d)
		}
		sort.Strings(deps)
		for _, d := range deps {
			if err := visit(byID[d]); err != nil {
				return err
			}
		}
		stack = stack[:len(stack)-1]
		state[n.t.ID] = done
		out = append(out, n)
		return nil
	}
	for _, n := range nodes {
		if err := visit(n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func known(ids map[string]bool) string {
	names := []string{SchemaVar}
	for id := range ids {
		names = append(names, id)
	}
	sort.Strings(names[1:])
	return strings.Join(names, ", ")
}

// ParseGraph decodes a providerconfig spec as a graph.
func ParseGraph(spec json.RawMessage) (Graph, error) {
	var g Graph
	if len(spec) == 0 || string(spec) == "null" {
		return g, errors.New("no providerconfig spec: it needs resources")
	}
	dec := json.NewDecoder(strings.NewReader(string(spec)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&g); err != nil {
		return g, fmt.Errorf("providerconfig spec: %w", err)
	}
	return g, nil
}
