package api

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"
)

// opLimits is every per-operation limit, checked once the query is parsed
// and validated and before anything runs (after refusing a NUL character
// in its strings, see refuseNUL): complexity (saturating: no
// argument value can overflow it), nesting depth, the alias fan-out, and
// introspection's cost. A query that passes every limit is then admitted to
// the parsed-query cache (see queryCache); one that fails is not kept.
type opLimits struct {
	es         graphql.ExecutableSchema
	complexity int
	depth      int
	aliases    int
	introCost  int
	cache      *queryCache
}

var (
	_ graphql.HandlerExtension        = (*opLimits)(nil)
	_ graphql.OperationContextMutator = (*opLimits)(nil)
)

func (*opLimits) ExtensionName() string { return "ConvergeLimits" }

func (l *opLimits) Validate(es graphql.ExecutableSchema) error {
	l.es = es
	return nil
}

func limitErr(limit, format string, args ...any) *gqlerror.Error {
	err := gqlerror.Errorf(format, args...)
	err.Extensions = map[string]any{"code": codeBadUserInput, "limit": limit}
	return err
}

func (l *opLimits) MutateOperationContext(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	op := oc.Operation
	if op == nil {
		return nil
	}
	err := refuseNUL(oc)
	if err == nil {
		err = l.check(ctx, oc)
	}
	l.cache.admit(ctx, oc.RawQuery, err == nil)
	return err
}

func (l *opLimits) check(ctx context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	op := oc.Operation
	if depth := selectionDepth(op.SelectionSet, 0, false); depth > l.depth {
		return limitErr("depth", "operation is nested %d levels deep; the limit is %d (API_MAX_DEPTH)", depth, l.depth)
	}
	if depth := selectionDepth(op.SelectionSet, 0, true); depth > l.depth+introspectionExtraDepth {
		return limitErr("depth", "operation is nested %d levels deep counting introspection; the limit is %d", depth, l.depth+introspectionExtraDepth)
	}
	if n := countAliases(op.SelectionSet, 0); n > l.aliases {
		return limitErr("aliases", "operation uses %d aliases; the limit is %d (API_MAX_ALIASES)", n, l.aliases)
	}
	w := complexityWalker{es: l.es, schema: l.es.Schema(), vars: oc.Variables, cap: l.complexity + 1, introCost: l.introCost}
	if c := w.set(ctx, op.SelectionSet, 0); c > l.complexity {
		shown := fmt.Sprint(c)
		if c >= w.cap {
			shown = fmt.Sprintf("more than %d", l.complexity)
		}
		return limitErr("complexity", "operation has complexity %s; the limit is %d (API_MAX_COMPLEXITY)", shown, l.complexity)
	}
	return nil
}

// introspectionExtraDepth is how much deeper than API_MAX_DEPTH an
// operation may nest counting introspection fields (GraphiQL's
// introspection query nests type references about ten levels).
const introspectionExtraDepth = 12

// countAliases counts the aliased fields of an operation, fragments
// expanded (each alias of a field runs its resolver once more).
func countAliases(set ast.SelectionSet, seen int) int {
	if seen > 128 {
		return 0
	}
	n := 0
	for _, s := range set {
		switch s := s.(type) {
		case *ast.Field:
			if s.Alias != "" && s.Alias != s.Name {
				n = satAdd(n, 1)
			}
			n = satAdd(n, countAliases(s.SelectionSet, seen+1))
		case *ast.InlineFragment:
			n = satAdd(n, countAliases(s.SelectionSet, seen+1))
		case *ast.FragmentSpread:
			if s.Definition != nil {
				n = satAdd(n, countAliases(s.Definition.SelectionSet, seen+1))
			}
		}
	}
	return n
}

// satAdd adds non-negative a and b, saturating at MaxInt.
func satAdd(a, b int) int {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// complexityWalker is gqlgen's complexity walk made overflow-proof: child
// costs are clamped to cap (one over the limit, which already rejects), so
// are integer arguments handed to the schema's cost functions (a page size
// of MaxInt64 costs as much as one of cap, never a wrapped-around negative),
// a negative or zero cost from a cost function counts as saturated, and
// every sum saturates. Introspection's roots (__schema, __type) cost
// introCost each plus their selections, so a thousand aliased __schema
// fields are refused while GraphiQL's one introspection query passes.
type complexityWalker struct {
	es        graphql.ExecutableSchema
	schema    *ast.Schema
	vars      map[string]any
	cap       int
	introCost int
}

func (w complexityWalker) set(ctx context.Context, set ast.SelectionSet, seen int) int {
	if seen > 128 {
		return w.cap
	}
	total := 0
	for _, s := range set {
		switch s := s.(type) {
		case *ast.Field:
			total = satAdd(total, w.field(ctx, s, seen))
		case *ast.InlineFragment:
			total = satAdd(total, w.set(ctx, s.SelectionSet, seen+1))
		case *ast.FragmentSpread:
			if s.Definition != nil {
				total = satAdd(total, w.set(ctx, s.Definition.SelectionSet, seen+1))
			}
		}
		if total >= w.cap {
			return w.cap
		}
	}
	return total
}

func (w complexityWalker) field(ctx context.Context, f *ast.Field, seen int) int {
	child := min(w.set(ctx, f.SelectionSet, seen+1), w.cap)
	if f.Name == "__schema" || f.Name == "__type" {
		return min(satAdd(w.introCost, child), w.cap)
	}
	if f.ObjectDefinition == nil || len(f.Name) > 1 && f.Name[:2] == "__" {
		return min(satAdd(1, child), w.cap)
	}
	args := w.clampArgs(f.ArgumentMap(w.vars))
	best, found := 0, false
	defs := []*ast.Definition{f.ObjectDefinition}
	if f.ObjectDefinition.Kind == ast.Interface || f.ObjectDefinition.Kind == ast.Union {
		defs = w.schema.GetPossibleTypes(f.ObjectDefinition)
	}
	for _, d := range defs {
		c, ok := w.es.Complexity(ctx, d.Name, f.Name, child, args)
		if !ok {
			continue
		}
		found = true
		if c <= 0 { // a cost function overflowed: treat as the worst case
			c = w.cap
		}
		best = max(best, c)
	}
	if !found {
		best = satAdd(1, child)
	}
	return min(best, w.cap)
}

// clampArgs bounds integer arguments to cap for the cost functions (the
// resolvers still get the real values).
func (w complexityWalker) clampArgs(args map[string]any) map[string]any {
	out := make(map[string]any, len(args))
	for k, v := range args {
		switch n := v.(type) {
		case int:
			out[k] = min(n, w.cap)
		case int64:
			out[k] = min(n, int64(w.cap))
		case json.Number:
			if i, err := n.Int64(); err == nil && i > int64(w.cap) {
				out[k] = json.Number(strconv.Itoa(w.cap))
			} else {
				out[k] = v
			}
		case float64:
			out[k] = min(n, float64(w.cap))
		case *int:
			if n != nil {
				c := min(*n, w.cap)
				out[k] = &c
			} else {
				out[k] = v
			}
		default:
			out[k] = v
		}
	}
	return out
}
