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
		require.Equal(t, "first", r.Errors[0].Extensions["field"], q)
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
