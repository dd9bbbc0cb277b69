package api

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vektah/gqlparser/v2/ast"
)

// Only admitted documents are cached, the cache stays within its byte
// budget (oldest out first), and a query too large for it is never kept.
func TestQueryCache_HoldsOnlyAdmittedQueriesWithinItsBudget(t *testing.T) {
	t.Parallel()
	c := newQueryCache(16 * 1000) // room for ~1000 query bytes
	doc := &ast.QueryDocument{}
	request := func(q string, ok bool) {
		ctx := withParking(context.Background())
		c.Add(ctx, q, doc)
		c.admit(ctx, q, ok)
	}
	request("{ rejected }", false)
	n, _ := c.size()
	require.Zero(t, n, "a query refused by a limit is not cached")

	request("{ a }", true)
	_, ok := c.Get(context.Background(), "{ a }")
	require.True(t, ok, "an admitted query is cached")

	for i := range 50 {
		request("{ q"+strings.Repeat("x", 40)+string(rune('a'+i%26))+string(rune('a'+i/26))+" }", true)
	}
	n, used := c.size()
	require.LessOrEqual(t, used, int64(16*1000), "the cache stays within its budget")
	require.Less(t, n, 51, "older entries were evicted")
	_, ok = c.Get(context.Background(), "{ a }")
	require.False(t, ok, "the oldest entry went first")

	request("{ "+strings.Repeat("y", 200)+" }", true)
	_, ok = c.Get(context.Background(), "{ "+strings.Repeat("y", 200)+" }")
	require.False(t, ok, "a query over a tenth of the budget is never cached")

	c.Add(context.Background(), "{ unparked }", doc)
	c.admit(context.Background(), "{ unparked }", true)
	n2, _ := c.size()
	require.Equal(t, n, n2, "without a request slot nothing is cached")
}
