package browsertest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
	"github.com/converge-run/converge/frontend"
	"github.com/converge-run/converge/resolvers"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// stack is a running converge (API + dashboard) with a worker.
type stack struct {
	*apptest.Stack
	t    *testing.T
	base string // http://127.0.0.1:port
}

// startStack boots converge (ROLE=all) on a fresh database with the GraphQL
// API mounted as cmd/converge mounts it and the embedded dashboard as its
// UI, applies the test kinds and connects a worker serving them.
func startStack(t *testing.T) *stack {
	t.Helper()
	st := apptest.Start(t, apptest.Options{
		Version: "browsertest",
		// A faster phase-count cadence than production's.
		GraphQL: resolvers.Mount(resolvers.MountOptions{UI: frontend.HandlerFromEnv(os.Getenv),
			Hub: []live.Option{live.WithOptions(live.Options{CountsInterval: 100 * time.Millisecond, MemberPoll: time.Second})}}),
	})
	s := &stack{Stack: st, t: t, base: st.APIURL()}
	s.apply(`mutation($m: JSON!) { applyKindManifest(manifest: $m) { name } }`, map[string]any{"m": json.RawMessage(leafKind)})
	s.apply(`mutation($m: JSON!) { applyKindManifest(manifest: $m) { name } }`, map[string]any{"m": json.RawMessage(netKind)})
	st.StartWorker(apptest.Worker{Options: worker.Options{MaxParallel: 16},
		Providers: []worker.Provider{apptest.NewProvider("leaf", leafWork), apptest.NewProvider("net", netWork)}})
	return s
}

// apply runs a GraphQL operation over HTTP and fails the test on errors.
func (s *stack) apply(query string, vars map[string]any) json.RawMessage {
	s.t.Helper()
	data, errs := s.gql(query, vars)
	require.Empty(s.t, errs, "%s", query)
	return data
}

func (s *stack) gql(query string, vars map[string]any) (json.RawMessage, []map[string]any) {
	s.t.Helper()
	b, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	require.NoError(s.t, err)
	res, err := http.Post(s.base+"/graphql", "application/json", bytes.NewReader(b))
	require.NoError(s.t, err)
	defer res.Body.Close()
	var out struct {
		Data   json.RawMessage  `json:"data"`
		Errors []map[string]any `json:"errors"`
	}
	require.NoError(s.t, json.NewDecoder(res.Body).Decode(&out))
	return out.Data, out.Errors
}

// applyResource creates or updates a resource through the API.
func (s *stack) applyResource(kind, name string, spec any, labels map[string]string) {
	s.t.Helper()
	if labels == nil {
		labels = map[string]string{}
	}
	s.apply(`mutation($in: ResourceInput!) { applyResource(input: $in) { id } }`,
		map[string]any{"in": map[string]any{"kind": kind, "name": name, "spec": spec, "labels": labels}})
}
