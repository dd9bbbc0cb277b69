package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sort"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// TestDependencies_AreBoundedAndCostTheirSize: Resource.dependencies
// returns at most first upstreams (default 100, 1-500) and costs its page
// size in the complexity budget, like every other list. It returned every
// edge and cost one: with 161 resources in four layers of 40, each
// depending on the whole layer below, a four-level nested dependencies
// query of complexity ~20 expanded to 2.56M objects and ran for a minute
// (past API_REQUEST_TIMEOUT).
func TestDependencies_AreBoundedAndCostTheirSize(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.manifest(workerKind)
	top := e.apply("leaf", "top", `{}`)
	_, err := e.pool.Exec(e.ctx, `
INSERT INTO resources (id, kind, version, name, shard_id)
SELECT g, 'leaf', 'v1', format('up-%s', lpad(i::text, 3, '0')), shard_of(g)
  FROM (SELECT gen_random_uuid() g, i FROM generate_series(1, 150) i) s`)
	require.NoError(t, err)
	_, err = e.pool.Exec(e.ctx, `INSERT INTO resource_deps (dependent_id, dependency_id, value_flows)
		SELECT $1::uuid, r.id, '[]'::jsonb FROM resources r WHERE r.name LIKE 'up-%'`, top)
	require.NoError(t, err)

	type deps struct {
		Dependencies []struct{ Upstream struct{ Name string } }
	}
	names := func(d deps) []string {
		out := make([]string, len(d.Dependencies))
		for i, x := range d.Dependencies {
			out[i] = x.Upstream.Name
		}
		return out
	}
	var one struct{ Resource deps }
	e.ok(`{ resource(kind: "leaf", name: "top") { dependencies { upstream { name } } } }`, nil, &one)
	require.Len(t, one.Resource.Dependencies, 100, "the default page")
	require.True(t, sort.StringsAreSorted(names(one.Resource)), "by kind then name")
	e.ok(`{ resource(kind: "leaf", name: "top") { dependencies(first: 500) { upstream { name } } } }`, nil, &one)
	require.Len(t, one.Resource.Dependencies, 150)
	require.Equal(t, "up-001", one.Resource.Dependencies[0].Upstream.Name)

	// in a page (the prefetch) and through the loaders (a single resource)
	var page struct {
		Resources struct {
			Items []struct {
				Name string
				deps
			}
		}
	}
	e.ok(`{ resources(first: 200) { items { name dependencies(first: 10) { upstream { name } } } } }`, nil, &page)
	for _, it := range page.Resources.Items {
		if it.Name == "top" {
			require.Len(t, it.Dependencies, 10)
			continue
		}
		require.Empty(t, it.Dependencies, it.Name)
	}

	r := e.do("", `{ resource(kind: "leaf", name: "top") { dependencies(first: 501) { upstream { name } } } }`, nil)
	require.Equal(t, "BAD_USER_INPUT", r.code(), "%+v", r.Errors)
	require.Equal(t, "first", r.Errors[0].Extensions["field"])
	require.Contains(t, r.Errors[0].Message, "1-500")

	nested := `{ resource(kind: "leaf", name: "top") { dependencies { upstream { dependencies { upstream {
		dependencies { upstream { dependencies { upstream { id } } } } } } } } } }`
	r = e.do("", nested, nil)
	require.Equal(t, "complexity", fmt.Sprint(r.Errors[0].Extensions["limit"]), "%+v", r.Errors)
}

// TestDependencies_TheClientsPagesFitTheComplexityLimit: the two pages that
// read every row's upstreams — the dashboard's graph (250 nodes a page) and
// conctl apply --wait's children (100 a page) — fit the default complexity
// limit now that dependencies costs its page size.
func TestDependencies_TheClientsPagesFitTheComplexityLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, tc := range map[string]struct {
		reason string
		files  []string
		op     string
		first  int
	}{
		"Graph":        {"the graph view's page (frontend/src/graph/load.ts PAGE)", []string{"../../frontend/src/graph/graph.graphql"}, "GraphChildren", 250},
		"ApplyWaitCLI": {"conctl apply --wait's children page (cli/wait.go childPage)", []string{"../../cli/resources.graphql"}, "ResourceChildren", 100},
	} {
		var doc string
		for _, f := range tc.files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			doc += string(b)
		}
		body, err := json.Marshal(map[string]any{"query": doc, "operationName": tc.op,
			"variables": map[string]any{"ownerId": uuid.NewString(), "id": uuid.NewString(), "first": tc.first}})
		require.NoError(t, err)
		resp, err := http.Post(e.srv.URL+"/graphql", "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		var out gqlResponse
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		require.NoError(t, resp.Body.Close())
		require.Empty(t, out.Errors, "%s: %s", name, tc.reason)
	}
}
