package stdstarlark

import (
	"fmt"

	"go.starlark.net/starlark"
	"go.starlark.net/syntax"
)

// A value also grows one element a step — a comprehension's element, an
// append, a dict key set by index — which no single-step check sees: in
// the step budget such a loop built lists and dicts of millions of
// elements. The rewrite routes these through the guards below, which
// refuse the element past MaxLen.
const (
	compBeginFn = "·comprehension"
	compElemFn  = "·element"
	growFn      = "·grow"
)

// compCounts is a run's element count of each comprehension being
// evaluated, by the comprehension's position (a comprehension cannot be
// re-entered while it is evaluated: that would be recursion).
type compCounts map[string]int

const compCountsKey = "stdstarlark.comprehensions"

func comprehensionCounts(thread *starlark.Thread) compCounts {
	c, ok := thread.Local(compCountsKey).(compCounts)
	if !ok {
		c = compCounts{}
		thread.SetLocal(compCountsKey, c)
	}
	return c
}

// beginComprehension wraps the first for clause's iterable, evaluated once
// as the comprehension starts: its count starts at zero.
func beginComprehension(thread *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
	comprehensionCounts(thread)[string(args[1].(starlark.String))] = 0
	return args[0], nil
}

// comprehensionElement wraps a list comprehension's body (a dict
// comprehension's key): one more element, refused past MaxLen.
func comprehensionElement(thread *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
	counts, at := comprehensionCounts(thread), string(args[1].(starlark.String))
	counts[at]++
	if n := counts[at]; n > MaxLen {
		return nil, fmt.Errorf("the comprehension would hold more than %d elements, the sandbox's limit per value (MaxLen)", MaxLen)
	}
	return args[0], nil
}

// grow wraps the dict of an index assignment (d[k] = v), which refuses a
// new key past MaxLen; any other value is returned as is.
func grow(_ *starlark.Thread, _ *starlark.Builtin, args starlark.Tuple, _ []starlark.Tuple) (starlark.Value, error) {
	if d, ok := args[0].(*starlark.Dict); ok {
		return growingDict{d}, nil
	}
	return args[0], nil
}

// growingDict is a dict about to have a key set by index.
type growingDict struct{ d *starlark.Dict }

func (g growingDict) String() string        { return g.d.String() }
func (g growingDict) Type() string          { return g.d.Type() }
func (g growingDict) Freeze()               { g.d.Freeze() }
func (g growingDict) Truth() starlark.Bool  { return g.d.Truth() }
func (g growingDict) Hash() (uint32, error) { return g.d.Hash() }

// Get reads d[k] (for d[k] += v).
func (g growingDict) Get(k starlark.Value) (starlark.Value, bool, error) { return g.d.Get(k) }

// SetKey sets d[k], refusing a new key past MaxLen.
func (g growingDict) SetKey(k, v starlark.Value) error {
	if g.d.Len() >= MaxLen {
		if _, found, err := g.d.Get(k); err != nil || !found {
			return tooLarge("the dict", g.d.Len()+1)
		}
	}
	return g.d.SetKey(k, v)
}

// guardGrowth rewrites a comprehension to count its elements, and the
// index targets of an assignment (or a for loop's variables) to guard the
// dict they may add a key to.
func guardGrowth(n syntax.Node) {
	switch n := n.(type) {
	case *syntax.Comprehension:
		start, _ := n.Span()
		at := &syntax.Literal{Token: syntax.STRING, TokenPos: start, Value: start.String(), Raw: fmt.Sprintf("%q", start.String())}
		if first, ok := n.Clauses[0].(*syntax.ForClause); ok {
			first.X = call(compBeginFn, first.For, first.X, at)
		}
		if entry, ok := n.Body.(*syntax.DictEntry); ok {
			entry.Key = call(compElemFn, entry.Colon, entry.Key, at)
		} else {
			n.Body = call(compElemFn, start, n.Body, at)
		}
	case *syntax.AssignStmt:
		guardTargets(n.LHS)
	case *syntax.ForStmt:
		guardTargets(n.Vars)
	case *syntax.ForClause:
		guardTargets(n.Vars)
	}
}

func guardTargets(e syntax.Expr) {
	switch e := e.(type) {
	case *syntax.IndexExpr:
		e.X = call(growFn, e.Lbrack, e.X)
	case *syntax.ParenExpr:
		guardTargets(e.X)
	case *syntax.TupleExpr:
		for _, x := range e.List {
			guardTargets(x)
		}
	case *syntax.ListExpr:
		for _, x := range e.List {
			guardTargets(x)
		}
	}
}
