package cli_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/live"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
	"github.com/converge-run/converge/examples/classic"
	"github.com/converge-run/converge/resolvers"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// testLog is quiet unless CONVERGE_TEST_LOG=debug.
func testLog() zerolog.Logger {
	if os.Getenv("CONVERGE_TEST_LOG") == "debug" {
		return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	}
	return zerolog.Nop()
}

// stack is a real converge (ROLE=all) on a private database with the
// GraphQL handler mounted the way cmd/converge mounts it, and (optionally)
// the classic demo's worker connected to its broker.
type stack struct {
	t      *testing.T
	p      *app.Process
	hub    *live.Hub
	store  *store.Store
	server string // http://127.0.0.1:port
}

type stackOpts struct {
	noWorker bool
	tokens   string // API_TOKENS_FILE content; empty = open API
}

func startStack(t *testing.T, o stackOpts) *stack {
	t.Helper()
	bootAt := time.Now()
	db := pgtest.URL(t)
	cfg, err := config.Parse(func(k string) string {
		return map[string]string{
			"DATABASE_URL":           db,
			"ROLE":                   "all",
			"LISTEN_ADDR":            "127.0.0.1:0",
			"HEALTH_ADDR":            "127.0.0.1:0",
			"MEMBER_HEARTBEAT_EVERY": "1s",
			"SHUTDOWN_DRAIN":         "5s",
		}[k]
	}, "v-test")
	require.NoError(t, err)
	if o.tokens != "" {
		path := filepath.Join(t.TempDir(), "tokens")
		require.NoError(t, os.WriteFile(path, []byte(o.tokens), 0o600))
		cfg.APITokensFile = path
	}
	log := testLog()
	s := &stack{t: t}
	mount := resolvers.Mount(resolvers.MountOptions{
		Hub:   []live.Option{live.WithOptions(live.Options{CountsInterval: 20 * time.Millisecond, MemberPoll: 200 * time.Millisecond})},
		OnHub: func(h *live.Hub) { s.hub = h },
	})
	ctx, cancel := context.WithCancel(context.Background())
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
	select {
	case s.p = <-started:
	case err := <-done:
		cancel()
		t.Fatalf("converge exited during start-up: %v", err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("converge did not become ready")
	}
	t.Cleanup(func() {
		stopAt := time.Now()
		defer func() { t.Logf("converge stopped in %s", time.Since(stopAt)) }()
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("converge did not stop")
		}
	})
	require.Eventually(t, func() bool { _, _, ok := s.p.Shards.Bounds(); return ok }, 20*time.Second, 10*time.Millisecond,
		"the member gets its shard range")
	t.Logf("converge ready in %s", time.Since(bootAt))
	s.store = s.p.Store
	s.server = "http://" + s.p.Addr("api").String()
	if !o.noWorker {
		s.serveClassic()
	}
	return s
}

// serveClassic connects the classic demo's worker until the test ends.
func (s *stack) serveClassic() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = worker.Serve(ctx, s.server, worker.Options{MaxParallel: 32, DrainTimeout: 5 * time.Second,
			ReconnectMax: 500 * time.Millisecond, Logger: testLog()}, classic.Providers(testLog())...)
	}()
	s.t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// result is one conctl run.
type result struct {
	code           int
	stdout, stderr string
}

// conctl runs a conctl command line against the stack (CONVERGE_SERVER),
// in-process, with ages pinned to "1m" so tables are stable.
func (s *stack) conctl(args ...string) result { return s.conctlIn("", args...) }

func (s *stack) conctlIn(stdin string, args ...string) result {
	s.t.Helper()
	return runConctl(context.Background(), s.server, stdin, args...)
}

func runConctl(ctx context.Context, server, stdin string, args ...string) result {
	var out, errb syncBuffer
	code := cli.Run(ctx, testEnv(server, stdin, &out, &errb), args)
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

// testEnv is a conctl environment talking to server.
func testEnv(server, stdin string, stdout, stderr *syncBuffer) cli.Env {
	return cli.Env{
		Stdin: strings.NewReader(stdin), Stdout: stdout, Stderr: stderr,
		Getenv:  func(k string) string { return map[string]string{"CONVERGE_SERVER": server}[k] },
		Version: "v-test",
		Age:     func(time.Time) string { return "1m" },
	}
}

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// must fails the test unless r succeeded.
func must(t *testing.T, r result) result {
	t.Helper()
	require.Equalf(t, 0, r.code, "conctl failed\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	return r
}

// golden compares got with testdata/golden/name (rewritten with -update).
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "missing golden file (run go test ./cli -run %s -update)", t.Name())
	require.Equal(t, string(want), got, "golden file %s differs (run with -update to rewrite)", path)
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// classicFixtures is the classic demo's fixture directory.
const classicFixtures = "../examples/classic/testfixtures"
