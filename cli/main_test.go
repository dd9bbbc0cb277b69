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

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/app/apptest"
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

// stack is a real converge (ROLE=all) on a private database with the
// GraphQL API mounted as cmd/converge mounts it, and (optionally) the
// classic demo's worker connected to its broker.
type stack struct {
	*apptest.Stack
	t      *testing.T
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
	s := &stack{t: t}
	opts := apptest.Options{
		Version: "v-test",
		GraphQL: resolvers.Mount(resolvers.MountOptions{
			Hub:   []live.Option{live.WithOptions(live.Options{CountsInterval: 20 * time.Millisecond, MemberPoll: 200 * time.Millisecond})},
			OnHub: func(h *live.Hub) { s.hub = h },
		}),
	}
	if o.tokens != "" {
		path := filepath.Join(t.TempDir(), "tokens")
		require.NoError(t, os.WriteFile(path, []byte(o.tokens), 0o600))
		opts.Config = func(c *config.Config) { c.APITokensFile = path }
	}
	if !o.noWorker {
		opts.Workers = []apptest.Worker{{Options: worker.Options{MaxParallel: 32}, Providers: classic.Providers(apptest.Logger(t))}}
	}
	s.Stack = apptest.Start(t, opts)
	s.store, s.server = s.Store, s.APIURL()
	return s
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

// classicFixtures is the classic demo's fixture directory.
const classicFixtures = "../examples/classic/testfixtures"
