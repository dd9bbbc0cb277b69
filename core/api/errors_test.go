package api_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/api"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/notify"
	"github.com/converge-run/converge/db/pgtest"
	"github.com/converge-run/converge/resolvers"
)

// TestErrors_EachCodeFromTheInputThatCausesIt: every extensions.code the API
// produces, from the input that should produce it, with the offending field
// or pointer named and nothing written.
func TestErrors_EachCodeFromTheInputThatCausesIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withTokens())
	e.manifest(workerKind)
	e.apply("leaf", "a", `{size: 1}`)
	e.ok(`mutation { applyProviderConfig(input: {kind: "leaf", name: "one", isDefault: true, spec: {}}) { id } }`, nil, nil)

	cases := map[string]struct {
		reason  string
		token   string
		query   string
		code    string
		field   string
		pointer string
		status  int
	}{
		"SpecSchemaViolation": {
			reason: "a spec that breaks the kind's spec_schema names the JSON pointer",
			token:  adminToken, query: `mutation { applyResource(input: {kind: "leaf", name: "b", spec: {size: "big"}}) { id } }`,
			code: "BAD_USER_INPUT", field: "spec", pointer: "/size",
		},
		"UnknownKind": {
			reason: "an apply of an undeclared kind names the kind field",
			token:  adminToken, query: `mutation { applyResource(input: {kind: "nope", name: "b", spec: {}}) { id } }`,
			code: "BAD_USER_INPUT", field: "kind",
		},
		"IllegalManifest": {
			reason: "an illegal manifest names the pointer of the violation",
			token:  adminToken, query: `mutation { applyKindManifest(manifest: {kind: "x", reactions: [{name: "r", trigger: "operation", emits: ["operationOutput"]}]}) { name } }`,
			code: "BAD_USER_INPUT", field: "manifest", pointer: "/reactions/0/verb",
		},
		"BadCursor": {
			reason: "a cursor this list never returned is bad input on after",
			token:  adminToken, query: `{ resources(after: "garbage") { nextCursor } }`,
			code: "BAD_USER_INPUT", field: "after",
		},
		"BadID": {
			reason: "an id that is not a UUID",
			token:  adminToken, query: `{ resourceById(id: "42") { id } }`,
			code: "BAD_USER_INPUT", field: "id",
		},
		"UnknownResource": {
			reason: "a mutation on a resource that does not exist",
			token:  adminToken, query: `mutation { deleteResource(kind: "leaf", name: "ghost") { id } }`,
			code: "NOT_FOUND",
		},
		"UnknownBinding": {
			reason: "deleting a binding that does not exist",
			token:  adminToken, query: `mutation { deleteReactorBinding(name: "ghost") }`,
			code: "NOT_FOUND",
		},
		"SecondDefault": {
			reason: "a second default providerconfig of a kind conflicts",
			token:  adminToken, query: `mutation { applyProviderConfig(input: {kind: "leaf", name: "two", isDefault: true, spec: {}}) { id } }`,
			code: "CONFLICT",
		},
		"NoToken": {
			reason: "with tokens configured, a request without one",
			query:  `{ version }`, code: "UNAUTHENTICATED", status: http.StatusUnauthorized,
		},
		"WrongToken": {
			reason: "an unknown token",
			token:  "not-a-real-token-at-all", query: `{ version }`, code: "UNAUTHENTICATED", status: http.StatusUnauthorized,
		},
		"ViewerMutates": {
			reason: "a viewer token runs a mutation",
			token:  viewerToken, query: `mutation { deleteResource(kind: "leaf", name: "a") { id } }`, code: "FORBIDDEN",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			r := e.do(tc.token, tc.query, nil)
			require.Equal(t, tc.code, r.code(), "%s: %+v", tc.reason, r.Errors)
			ext := r.Errors[0].Extensions
			if tc.field != "" {
				require.Equal(t, tc.field, ext["field"], tc.reason)
				require.Contains(t, r.Errors[0].Message, tc.field, "the message names the field")
			}
			if tc.pointer != "" {
				require.Equal(t, tc.pointer, ext["pointer"], tc.reason)
			}
			if tc.status != 0 {
				require.Equal(t, tc.status, r.status)
			}
		})
	}

	// Nothing was written by the failed mutations.
	var got struct {
		B       *struct{ ID string }
		A       struct{ Phase string }
		Configs struct{ Items []struct{ Name string } }
	}
	e.ok(`{ b: resource(kind: "leaf", name: "b") { id } a: resource(kind: "leaf", name: "a") { phase }
		configs: providerConfigs(kind: "leaf") { items { name } } }`, nil, &got)
	require.Nil(t, got.B)
	require.Equal(t, "RECONCILING", got.A.Phase, "the viewer's delete did not happen")
	require.Len(t, got.Configs.Items, 1)
}

// TestErrors_InternalHidesTheCauseAndNamesTheRequest: a database failure is
// INTERNAL with the request id, without the driver's text.
func TestErrors_InternalHidesTheCauseAndNamesTheRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL(t))
	require.NoError(t, err)
	pool.Close() // every statement now fails with "closed pool"
	log := zerolog.Nop()
	hub := live.NewHub(notify.NewListener(pool, log), pool, log)
	srv := httptest.NewServer(api.NewHandler(api.Deps{Schema: resolvers.NewSchema(resolvers.Deps{Store: store.New(pool, pool), Hub: hub}), Log: log}))
	t.Cleanup(srv.Close)

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/graphql", strings.NewReader(`{"query":"{ kinds { name } }"}`))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", "req-42")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	body := buf.String()
	require.Contains(t, body, `"code":"INTERNAL"`)
	require.Contains(t, body, `"requestId":"req-42"`)
	require.Contains(t, body, "request id req-42")
	require.NotContains(t, body, "closed pool")
}

// TestLimits_RejectOversizedAndTooDeepRequests: body size, depth and
// complexity limits.
func TestLimits_RejectOversizedAndTooDeepRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(api.Limits{BodyBytes: 2048, Depth: 4, Complexity: 500, IntrospectionCost: 10, RequestTimeout: 10 * time.Second}))

	big := `{ version }` + strings.Repeat(" ", 4096)
	r := e.do("", big, nil)
	require.Equal(t, http.StatusRequestEntityTooLarge, r.status)
	require.Equal(t, "BAD_USER_INPUT", r.code())

	deep := `{ resources { items { owner { owner { owner { owner { id } } } } } } }`
	r = e.do("", deep, nil)
	require.Equal(t, "BAD_USER_INPUT", r.code(), "%+v", r.Errors)
	require.Equal(t, "depth", r.Errors[0].Extensions["limit"])

	wide := `{ resources(first: 500) { items { id name kind } } }`
	r = e.do("", wide, nil)
	require.NotEmpty(t, r.Errors, "complexity 500 × 3 is over the limit")
	require.Contains(t, r.Errors[0].Message, "complexity")

	introspection := `{ __schema { types { name fields { name type { name ofType { name ofType { name ofType { name } } } } } } } }`
	r = e.do("", introspection, nil)
	require.Empty(t, r.Errors, "introspection does not count toward depth")
}
