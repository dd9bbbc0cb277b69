package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
)

// graphiqlIntrospection is the introspection query GraphiQL sends
// (graphql-js getIntrospectionQuery).
const graphiqlIntrospection = `query IntrospectionQuery {
  __schema {
    queryType { name } mutationType { name } subscriptionType { name }
    types { ...FullType }
    directives { name description locations args { ...InputValue } }
  }
}
fragment FullType on __Type {
  kind name description
  fields(includeDeprecated: true) { name description args { ...InputValue } type { ...TypeRef } isDeprecated deprecationReason }
  inputFields { ...InputValue }
  interfaces { ...TypeRef }
  enumValues(includeDeprecated: true) { name description isDeprecated deprecationReason }
  possibleTypes { ...TypeRef }
}
fragment InputValue on __InputValue { name description type { ...TypeRef } defaultValue }
fragment TypeRef on __Type {
  kind name
  ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name ofType { kind name } } } } } } }
}`

// A page size of MaxInt64 cannot overflow the complexity into a small or
// negative number: it is refused as over the limit, named, BAD_USER_INPUT —
// inline or as a variable.
func TestLimits_ComplexitySaturatesInsteadOfOverflowing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, first := range []string{fmt.Sprint(math.MaxInt64), fmt.Sprint(math.MaxInt64 / 2), "4611686018427387905"} {
		r := e.do("", `{ resources(first: `+first+`) { items { id name kind children(first: `+first+`) { items { id } } } } }`, nil)
		require.Equal(t, "BAD_USER_INPUT", r.code(), "first: %s: %+v", first, r.Errors)
		require.Equal(t, "complexity", r.Errors[0].Extensions["limit"], "the refusal names the limit")
		require.Contains(t, r.Errors[0].Message, "API_MAX_COMPLEXITY")
	}
	r := e.do("", `query($n: Int) { resources(first: $n) { items { id name } } }`, map[string]any{"n": math.MaxInt32})
	require.Equal(t, "BAD_USER_INPUT", r.code(), "a variable page size is clamped too: %+v", r.Errors)
	require.Equal(t, "complexity", r.Errors[0].Extensions["limit"])
}

// Introspection counts: GraphiQL's one introspection query passes, a
// thousand aliased __schema fields are refused before anything runs.
func TestLimits_IntrospectionIsCountedAndGraphiQLStillWorks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.do("", graphiqlIntrospection, nil)
	require.Empty(t, r.Errors, "GraphiQL's introspection query passes every limit")
	require.Contains(t, string(r.Data), `"queryType"`)

	var b strings.Builder
	b.WriteString("{")
	for i := range 1000 {
		fmt.Fprintf(&b, " s%d: __schema { types { name fields { name } } }", i)
	}
	b.WriteString(" }")
	start := time.Now()
	r = e.do("", b.String(), nil)
	require.Equal(t, "BAD_USER_INPUT", r.code(), "%+v", r.Errors)
	require.Contains(t, []string{"", "null"}, string(r.Data), "nothing ran")
	require.Less(t, time.Since(start), 10*time.Second)
}

// Aliases fan a resolver out: past API_MAX_ALIASES the operation is
// refused without running one SQL statement.
func TestLimits_AliasFanOutIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{Aliases: 50}))
	alias := func(n int) string {
		var b strings.Builder
		b.WriteString("{")
		for i := range n {
			fmt.Fprintf(&b, ` a%d: resourceById(id: "00000000-0000-0000-0000-00000000000%d") { id }`, i, i%10)
		}
		return b.String() + " }"
	}
	before := e.stmts.Load()
	r := e.do("", alias(500), nil)
	require.Equal(t, "BAD_USER_INPUT", r.code(), "%+v", r.Errors)
	require.Equal(t, "aliases", r.Errors[0].Extensions["limit"])
	require.Contains(t, r.Errors[0].Message, "API_MAX_ALIASES")
	require.Equal(t, before, e.stmts.Load(), "no SQL ran for the refused operation")

	r = e.do("", alias(50), nil)
	require.Empty(t, r.Errors, "50 aliases are within the limit")

	r = e.do("", alias(5000), nil)
	require.Equal(t, "BAD_USER_INPUT", r.code(), "%+v", r.Errors)
	require.Equal(t, "tokens", r.Errors[0].Extensions["limit"], "a huge document is refused while parsing")
}

func TestLimitsFromEnv_NewLimits(t *testing.T) {
	t.Parallel()
	env := map[string]string{"API_MAX_ALIASES": "7", "API_INTROSPECTION_COST": "9", "API_MAX_TOKENS": "300", "API_QUERY_CACHE_BYTES": "4096",
		"API_WS_MAX_OPERATIONS": "3"}
	l, err := api.LimitsFromEnv(func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, api.Limits{Aliases: 7, IntrospectionCost: 9, Tokens: 300, QueryCacheBytes: 4096, OperationsPerConn: 3}, l)
	_, err = api.LimitsFromEnv(func(k string) string { return map[string]string{"API_MAX_ALIASES": "-1"}[k] })
	require.ErrorContains(t, err, "API_MAX_ALIASES")
	_, err = api.LimitsFromEnv(func(k string) string { return map[string]string{"API_WS_MAX_OPERATIONS": "0"}[k] })
	require.ErrorContains(t, err, "API_WS_MAX_OPERATIONS")
	// A period every websocket repeats has a floor: 1ns would ping in a loop.
	_, err = api.LimitsFromEnv(func(k string) string { return map[string]string{"API_WS_KEEPALIVE": "1ns"}[k] })
	require.EqualError(t, err, `API_WS_KEEPALIVE="1ns": want at least 1s`)
	l, err = api.LimitsFromEnv(func(k string) string { return map[string]string{"API_WS_KEEPALIVE": "1s"}[k] })
	require.NoError(t, err)
	require.Equal(t, time.Second, l.KeepAlive)
}

// rawPost POSTs body as given (chunked when chunked) and returns the status
// and the response body.
func rawPost(t *testing.T, e *env, body string, chunked bool) (int, string) {
	t.Helper()
	var r io.Reader = strings.NewReader(body)
	if chunked {
		r = io.MultiReader(r) // no length: sent chunked
	}
	req, err := http.NewRequestWithContext(e.ctx, http.MethodPost, e.srv.URL+"/graphql", r)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// Bodies: over the limit is 413 naming it, chunked or not; an undecodable
// body is BAD_USER_INPUT and is not echoed back; a NUL character is
// BAD_USER_INPUT, not an INTERNAL database failure.
func TestLimits_BodiesAreRefusedWithCodesAndNeverEchoed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{BodyBytes: 4096}))
	big := `{"query":"{ version }","variables":{"pad":"` + strings.Repeat("p", 8192) + `"}}`
	for _, chunked := range []bool{false, true} {
		status, body := rawPost(t, e, big, chunked)
		require.Equal(t, http.StatusRequestEntityTooLarge, status, "chunked=%v", chunked)
		require.Contains(t, body, "API_MAX_BODY_BYTES")
		require.Contains(t, body, `"code":"BAD_USER_INPUT"`)
	}
	secret := "not-json-" + strings.Repeat("s", 1000)
	status, body := rawPost(t, e, secret, false)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, body, `"code":"BAD_USER_INPUT"`)
	require.NotContains(t, body, "ssssssssss", "the request body is not echoed")

	status, body = rawPost(t, e, `{"query":"query($n: String!) { resource(kind: \"leaf\", name: $n) { id } }","variables":{"n":"a\u0000b"}}`, false)
	require.Equal(t, http.StatusBadRequest, status, body)
	require.Contains(t, body, `"code":"BAD_USER_INPUT"`)
	require.Contains(t, body, "NUL")
	status, body = rawPost(t, e, `{"query":"{ version }","variables":{"s":"a\\u0000b"}}`, false)
	require.Equal(t, http.StatusOK, status, "an escaped backslash before u0000 is not a NUL: %s", body)
}

// A resource may carry at most 64 labels: 20,000 are refused naming the
// rule, and nothing is written.
func TestLimits_LabelCount(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{BodyBytes: 4 << 20}))
	e.manifest(workerKind)
	labels := map[string]string{}
	for i := range 20000 {
		labels[fmt.Sprintf("l%d", i)] = "v"
	}
	r := e.do("", `mutation($l: JSON) { applyResource(input: {kind: "leaf", name: "many", spec: {}, labels: $l}) { id } }`,
		map[string]any{"l": labels})
	require.Equal(t, "BAD_USER_INPUT", r.code(), "%+v", r.Errors)
	require.Equal(t, "label_count", r.Errors[0].Extensions["rule"])
	r = e.do("", `{ resource(kind: "leaf", name: "many") { id } }`, nil)
	require.Contains(t, []string{"", "NOT_FOUND"}, r.code())
	require.NotContains(t, string(r.Data), `"id"`, "nothing was written")
}

// A NUL in a GET query's variables is BAD_USER_INPUT too.
func TestLimits_NULInAGETRequest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	u := e.srv.URL + "/graphql?query=" + url.QueryEscape(`query($n: String!) { resource(kind: "leaf", name: $n) { id } }`) +
		"&variables=" + url.QueryEscape(`{"n":"a\u0000b"}`)
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s", b)
	require.Contains(t, string(b), `"code":"BAD_USER_INPUT"`)
}

// A NUL character is BAD_USER_INPUT wherever it hides — a GraphQL escape in
// a literal of the query text (in the JSON body "\\u0000", which is no NUL
// to the body check), a variable's default, a variable of a websocket
// operation (which never passes the body check) — never an INTERNAL
// failure in the database, and nothing is written.
func TestLimits_NULIsBadUserInputOnEveryTransport(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.manifest(workerKind)
	refused := func(r gqlResponse, how string) {
		t.Helper()
		require.Equal(t, "BAD_USER_INPUT", r.code(), "%s: %+v", how, r.Errors)
		require.Contains(t, r.Errors[0].Message, "NUL", how)
	}
	posts := map[string]struct {
		reason string
		body   string
	}{
		"Argument": {"an escape in an argument's literal",
			`{"query":"{ resources(kind: \"le\\u0000af\") { items { id } } }"}`},
		"InputObject": {"an escape inside an input object, in a mutation",
			`{"query":"mutation { applyResource(input: {kind: \"leaf\", name: \"a\\u0000b\", spec: {}}) { id } }"}`},
		"JSONLiteral": {"an escape in a JSON scalar's literal",
			`{"query":"mutation { applyResource(input: {kind: \"leaf\", name: \"c\", spec: {note: \"x\\u0000\"}}) { id } }"}`},
		"VariableDefault": {"an escape in a variable's default",
			`{"query":"query($k: String = \"le\\u0000af\") { resources(kind: $k) { items { id } } }"}`},
	}
	for name, tc := range posts {
		status, body := rawPost(t, e, tc.body, false)
		var r gqlResponse
		require.NoError(t, json.Unmarshal([]byte(body), &r), "%s: HTTP %d %s", name, status, body)
		refused(r, name+": "+tc.reason)
	}
	u := e.srv.URL + "/graphql?query=" + url.QueryEscape(`{ resource(kind: "le\u0000af", name: "x") { id } }`)
	resp, err := http.Get(u)
	require.NoError(t, err)
	var r gqlResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&r))
	_ = resp.Body.Close()
	refused(r, "GET with an escape in the query")

	for _, proto := range []string{"graphql-transport-ws", "graphql-ws"} {
		c := e.connect(proto, nil)
		c.subscribe("v", `query($n: String!) { resource(kind: "leaf", name: $n) { id } }`, map[string]any{"n": "a\x00b"})
		refused(opResult(t, c.nextFor("v", 10*time.Second)), proto+": a variable")
		c.subscribe("j", `mutation($s: JSON!) { applyResource(input: {kind: "leaf", name: "d", spec: $s}) { id } }`,
			map[string]any{"s": map[string]any{"deep": []any{"x\x00"}}})
		refused(opResult(t, c.nextFor("j", 10*time.Second)), proto+": a JSON variable")
		c.subscribe("l", `{ resource(kind: "le\u0000af", name: "x") { id } }`, nil)
		refused(opResult(t, c.nextFor("l", 10*time.Second)), proto+": an escape in the query")
	}
	var got struct {
		Resources struct{ Items []struct{ ID string } }
	}
	e.ok(`{ resources(kind: "leaf") { items { id } } }`, nil, &got)
	require.Empty(t, got.Resources.Items, "nothing was written")
}
