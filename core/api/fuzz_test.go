package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/converge-run/converge/core/api"
)

// FuzzGraphQLRequest sends arbitrary documents and variables through the
// real handler (limits, parsing, validation, variables, resolvers over a
// real database): the answer is never a 5xx, always JSON, every error
// carries an extensions.code, and none is INTERNAL (a user's input is never
// an internal fault).
func FuzzGraphQLRequest(f *testing.F) {
	e := newEnv(f, withLimits(api.Limits{Complexity: 2000, Aliases: 20, Tokens: 2000, BodyBytes: 64 << 10}))
	f.Add(`query($k: String, $n: Int) { resources(kind: $k, first: $n) { items { id name } nextCursor } }`, `{"k":"leaf","n":5}`)
	f.Add(`query($p: [Phase!]) { resources(phases: $p) { items { id } } }`, `{"p":["NOPE"]}`)
	f.Add(`{ resources(first: 9223372036854775807) { items { id children(first: 9223372036854775807) { items { id } } } } }`, `{}`)
	f.Add(`{ a: __schema { types { name } } b: __schema { types { name } } }`, `null`)
	f.Add(`query($id: ID!) { resourceById(id: $id) { id } }`, `{"id":"not-a-uuid"}`)
	f.Add(`query($a: String) { resources(after: $a) { items { id } } }`, `{"a":"!!"}`)
	f.Add(`{ version `, `{}`)
	f.Fuzz(func(t *testing.T, query, vars string) {
		body, err := json.Marshal(map[string]any{"query": query, "variables": json.RawMessage(vars)})
		if err != nil { // vars is not JSON: send it as a string instead
			body, _ = json.Marshal(map[string]any{"query": query, "variables": vars})
		}
		req, err := http.NewRequestWithContext(e.ctx, http.MethodPost, e.srv.URL+"/graphql", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		if resp.StatusCode >= 500 {
			t.Fatalf("status %d for %q %q: %s", resp.StatusCode, query, vars, raw)
		}
		var out gqlResponse
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("not JSON (%v) for %q %q: %s", err, query, vars, raw)
		}
		for _, ge := range out.Errors {
			code, _ := ge.Extensions["code"].(string)
			if code == "" || code == "INTERNAL" {
				t.Fatalf("error %q has code %q for %q %q", ge.Message, code, query, vars)
			}
		}
	})
}
