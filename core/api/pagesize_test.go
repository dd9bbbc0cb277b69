package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPageSize_TheRefusalSaysTheRuleServed: a top-level list refuses first: 0
// naming the rule it applies — at least 1, a page above 500 served as 500
// (docs/graphql.md) — not a 1-500 range that first: 600 then contradicts by
// being served.
func TestPageSize_TheRefusalSaysTheRuleServed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, q := range []string{
		`{ resources(first: 0) { nextCursor } }`,
		`{ providerConfigs(first: 0) { nextCursor } }`,
	} {
		r := e.do("", q, nil)
		require.Equal(t, "BAD_USER_INPUT", r.code(), q)
		require.Equal(t, "first", r.Errors[0].Extensions["field"], "%s: %+v", q, r.Errors)
		require.Contains(t, r.Errors[0].Message, "at least 1", q)
		require.Contains(t, r.Errors[0].Message, "above 500 is served as 500", q)
	}
	for _, q := range []string{
		`{ resources(first: 600) { nextCursor } }`,
		`{ providerConfigs(first: 600) { nextCursor } }`,
	} {
		r := e.do("", q, nil)
		require.Empty(t, r.Errors, "%s is served (as 500)", q)
	}
}

// TestPageSize_NestedPagesRefuseAboveTheirBound: the nested lists —
// children, history and dependents (1-500), operations (1-100) — refuse a
// first above their bound, naming it, as docs/graphql.md and their argument
// descriptions say; they served it cut to the bound, silently, while their
// refusal of 0 said "must be 1-500".
func TestPageSize_NestedPagesRefuseAboveTheirBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.manifest(workerKind)
	e.apply("leaf", "a", `{}`)
	for q, bound := range map[string]string{
		`{ resource(kind: "leaf", name: "a") { children(first: 501) { nextCursor } } }`: "1-500",
		`{ resource(kind: "leaf", name: "a") { history(first: 501) { nextCursor } } }`:  "1-500",
		`{ resource(kind: "leaf", name: "a") { dependents(first: 501) { name } } }`:     "1-500",
		`{ resource(kind: "leaf", name: "a") { operations(first: 101) { id } } }`:       "1-100",
		`{ resources(first: 1) { items { children(first: 501) { nextCursor } } } }`:     "1-500",
		`{ resources(first: 1) { items { dependents(first: 501) { name } } } }`:         "1-500",
		`{ resources(first: 1) { items { operations(first: 101) { id } } } }`:           "1-100",
	} {
		r := e.do("", q, nil)
		require.Equal(t, "BAD_USER_INPUT", r.code(), "%s: %+v", q, r.Errors)
		require.Equal(t, "first", r.Errors[0].Extensions["field"], "%s: %+v", q, r.Errors)
		require.Contains(t, r.Errors[0].Message, bound, q)
	}
	for _, q := range []string{
		`{ resource(kind: "leaf", name: "a") { children(first: 500) { nextCursor } history(first: 500) { nextCursor } dependents(first: 500) { name } operations(first: 100) { id } } }`,
		`{ resources(first: 10) { items { children(first: 500) { nextCursor } dependents(first: 500) { name } operations(first: 100) { id } } } }`,
	} {
		r := e.do("", q, nil)
		require.Empty(t, r.Errors, q)
	}
}
