package browsertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
	"github.com/converge-run/converge/frontend"
	"github.com/converge-run/converge/resolvers"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func testLog() zerolog.Logger {
	if os.Getenv("CONVERGE_TEST_LOG") == "debug" {
		return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	}
	return zerolog.Nop()
}

// stack is a running converge (API + dashboard) with a worker.
type stack struct {
	t    *testing.T
	p    *app.Process
	base string // http://127.0.0.1:port
}

// startStack boots converge (ROLE=all) on a fresh database with the
// GraphQL handler mounted at / and the embedded dashboard as its UI, applies
// the test kinds and connects a worker serving them.
func startStack(t *testing.T) *stack {
	t.Helper()
	cfg, err := config.Parse(func(k string) string {
		switch k {
		case "DATABASE_URL":
			return pgtest.URL(t)
		case "ROLE":
			return string(config.RoleAll)
		case "LISTEN_ADDR", "HEALTH_ADDR":
			return "127.0.0.1:0"
		case "MEMBER_HEARTBEAT_EVERY":
			return "1s"
		case "SHUTDOWN_DRAIN":
			return "5s"
		}
		return ""
	}, "browsertest")
	require.NoError(t, err)
	log := testLog()
	ctx, cancel := context.WithCancel(context.Background())
	// The wiring of cmd/converge's mounts, with a faster phase-count cadence.
	mount := resolvers.Mount(resolvers.MountOptions{UI: frontend.HandlerFromEnv(os.Getenv),
		Hub: []live.Option{live.WithOptions(live.Options{CountsInterval: 100 * time.Millisecond, MemberPoll: time.Second})}})
	started := make(chan *app.Process, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, cfg, log, app.Options{
			Mounts:  []app.Mount{mount},
			OnStart: func(p *app.Process) { started <- p },
			Tune: func(p *app.Process, d *app.Duties) {
				if d.Reaper != nil {
					d.Reaper.Every = 200 * time.Millisecond
					d.Reaper.RetryAfter = time.Second
				}
			},
		})
	}()
	var p *app.Process
	select {
	case p = <-started:
	case err := <-done:
		cancel()
		t.Fatalf("converge exited during start-up: %v", err)
	case <-time.After(90 * time.Second):
		cancel()
		t.Fatal("converge did not become ready")
	}
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Error("converge did not stop")
			}
		})
	})
	s := &stack{t: t, p: p, base: "http://" + p.Addr("api").String()}
	s.apply(`mutation($m: JSON!) { applyKindManifest(manifest: $m) { name } }`, map[string]any{"m": json.RawMessage(leafKind)})
	s.apply(`mutation($m: JSON!) { applyKindManifest(manifest: $m) { name } }`, map[string]any{"m": json.RawMessage(netKind)})
	startWorker(t, s.base)
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

// waitPhase polls the API (from the test, not the page) until kind/name is in phase.
func (s *stack) waitPhase(kind, name, phase string, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		data, _ := s.gql(`query($k: String!, $n: String!) { resource(kind: $k, name: $n) { phase } }`, map[string]any{"k": kind, "n": name})
		var out struct{ Resource *struct{ Phase string } }
		if json.Unmarshal(data, &out) == nil && out.Resource != nil {
			last = out.Resource.Phase
			if last == phase {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("%s/%s did not reach %s within %s (last %q)", kind, name, phase, within, last)
}

func startWorker(t *testing.T, url string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	opts := worker.Options{MaxParallel: 16, DrainTimeout: 5 * time.Second, ReconnectMax: 500 * time.Millisecond,
		HeartbeatEvery: 500 * time.Millisecond, Logger: testLog()}
	go func() {
		defer close(done)
		if err := worker.Serve(ctx, url, opts, newProvider("leaf", leafWork), newProvider("net", netWork)); err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}
