package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/examples/stack"
)

// bin holds the binaries TestMain builds once: devstack itself, and the
// converge and worker binaries it is pointed at (its default, building them
// with the go tool, is what `go run ./cmd/devstack` exercises).
var bin struct{ dir, devstack, converge, worker, datadrivenWorker string }

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "devstack-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin.dir = dir
	bin.devstack, bin.converge, bin.worker = filepath.Join(dir, "devstack"), filepath.Join(dir, "converge"), filepath.Join(dir, "worker")
	out, err := exec.Command("go", "build", "-o", dir+"/", ".", stack.ConvergePackage, stack.WorkerPackage).CombinedOutput()
	if err == nil {
		// Both demos' worker mains are named worker: this one gets its own folder.
		bin.datadrivenWorker = filepath.Join(dir, "datadriven", "worker")
		out, err = exec.Command("go", "build", "-o", bin.datadrivenWorker, "github.com/converge-run/converge/examples/datadriven/cmd/worker").CombinedOutput()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "build devstack, converge and the worker: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	if code == 0 {
		// Every devstack a test started is stopped and waited on.
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// args are the flags every test run passes.
func args(extra ...string) []string {
	return append([]string{"--addr", "127.0.0.1:0", "--converge-bin", bin.converge, "--worker-bin", bin.worker}, extra...)
}

// devstack is one running devstack process.
type devstack struct {
	cmd      *exec.Cmd
	lines    chan string
	done     chan error
	database string
	ready    string
	token    string // the admin token devstack generated and printed
	stderr   *tailWriter
}

// start runs devstack and waits (up to 3 minutes) for its ready: line.
func start(t *testing.T, args ...string) *devstack {
	t.Helper()
	d := &devstack{cmd: exec.Command(bin.devstack, args...), lines: make(chan string, 64), done: make(chan error, 1), stderr: &tailWriter{}}
	d.cmd.Env = append(os.Environ(), "LOG_LEVEL=warn")
	d.cmd.Stderr = d.stderr
	out, err := d.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, d.cmd.Start())
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
		d.done <- d.cmd.Wait()
	}()
	t.Cleanup(func() { // a failed test must not leave the stack running
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Signal(syscall.SIGINT)
			select {
			case err := <-d.done:
				t.Logf("devstack stopped: %v", err)
			case <-time.After(90 * time.Second):
				_ = d.cmd.Process.Kill()
			}
		}
	})
	deadline := time.After(3 * time.Minute)
	for d.ready == "" {
		select {
		case line, ok := <-d.lines:
			if !ok {
				t.Fatalf("devstack exited before ready: %v\n%s", <-d.done, d.stderr)
			}
			if v, ok := strings.CutPrefix(line, "database: "); ok {
				d.database = v
			}
			if v, ok := strings.CutPrefix(line, "admin token: "); ok {
				d.token = v
			}
			if v, ok := strings.CutPrefix(line, "ready: "); ok {
				d.ready = v
			}
		case <-deadline:
			t.Fatalf("devstack printed no ready: line within 3 minutes\n%s", d.stderr)
		}
	}
	require.NotEmpty(t, d.database, "database: is printed before ready:")
	go func() { // keep draining stdout
		for range d.lines {
		}
	}()
	return d
}

// interrupt sends SIGINT (Ctrl+C) and waits for a clean exit.
func (d *devstack) interrupt(t *testing.T) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-d.done:
		require.NoError(t, err, "devstack exits 0 on Ctrl+C\n%s", d.stderr)
	case <-time.After(90 * time.Second):
		t.Fatalf("devstack did not stop within 90s of SIGINT\n%s", d.stderr)
	}
}

func openStore(t *testing.T, dbURL string) *store.Store {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return store.New(pool, pool)
}

func TestDevstack_StartsAppliesTheDemoAndTearsDownOnSIGINT(t *testing.T) {
	t.Parallel()
	d := start(t, args()...)

	res, err := http.Get(d.ready + "/readyz")
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode, "converge answers /readyz")
	require.Len(t, d.token, 48, "devstack prints the admin token it generated")
	for token, want := range map[string]int{"": http.StatusUnauthorized, d.token: http.StatusOK} {
		req, err := http.NewRequest(http.MethodPost, d.ready+"/graphql", strings.NewReader(`{"query":"{__typename}"}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		res.Body.Close()
		require.Equal(t, want, res.StatusCode, "the API is authenticated by the printed token (token given: %v)", token != "")
	}

	st := openStore(t, d.database)
	ctx := context.Background()
	kinds, err := st.ListKinds(ctx)
	require.NoError(t, err)
	var names []string
	for _, k := range kinds {
		names = append(names, k.Name)
	}
	require.Subset(t, names, []string{"account", "bom", "classicbom", "route", "statussink", "tgw", "vpc"}, "the demo's manifests are applied")
	require.NotContains(t, names, "celbom", "--demo defaults to classic")
	_, err = st.GetResource(ctx, "bom", "acme")
	require.NoError(t, err, "the sample bom is applied")

	// The processes to account for after Ctrl+C.
	pg := postmaster(t, d.database)
	dataDir := flagValue(cmdline(pg), "-D")
	require.NotEmpty(t, dataDir)
	children := childrenOf(d.cmd.Process.Pid)
	require.Len(t, children, 3, "postgres, converge and the worker run under devstack")

	d.interrupt(t)
	require.Empty(t, inGroup(pg), "no postgres process is left (postmaster pid %d)", pg)
	for _, pid := range children {
		require.False(t, alive(pid), "child %d (%s) has exited", pid, cmdline(pid))
	}
	_, err = os.Stat(dataDir)
	require.True(t, os.IsNotExist(err), "the temporary data directory %s is removed", dataDir)
}

// TestDevstack_DemoAllServesBothDemos: --demo all applies both demos and
// runs the worker that serves both; their samples converge.
func TestDevstack_DemoAllServesBothDemos(t *testing.T) {
	t.Parallel()
	d := start(t, "--addr", "127.0.0.1:0", "--converge-bin", bin.converge, "--worker-bin", bin.datadrivenWorker, "--demo", "all")
	st := openStore(t, d.database)
	ctx := context.Background()
	// The last one is applied by the jobsaga reactor, over the stack's API.
	samples := []struct{ kind, name string }{{"classicbom", "platform"}, {"celbom", "shop"}, {"stdstarlark", "builds"},
		{"fakek8sjob", "ops-terraform-job"}}
	for _, sample := range samples {
		apptest.WaitPhase(t, st, sample.kind, sample.name, resource.PhaseReady, 3*time.Minute)
	}
	_, err := st.GetResource(ctx, "bom", "acme")
	require.NoError(t, err, "the classic samples are applied too")
	d.interrupt(t)
}

func TestDevstack_UnknownDemoIsRefused(t *testing.T) {
	t.Parallel()
	out, err := exec.Command(bin.devstack, "--demo", "nope").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `--demo "nope": want classic, datadriven or all`)
}

func TestDevstack_DataDirKeepsTheDatabaseBetweenRuns(t *testing.T) {
	t.Parallel()
	dataDir := filepath.Join(t.TempDir(), "pgdata")

	first := start(t, args("--data-dir", dataDir, "--no-sample")...)
	st := openStore(t, first.database)
	ctx := context.Background()
	_, err := st.GetResource(ctx, "bom", "acme")
	require.ErrorIs(t, err, store.ErrNotFound, "--no-sample skips the sample")
	_, _, err = st.ApplyResource(ctx, store.ApplyResourceInput{Kind: "bom", Name: "keepme",
		Spec: json.RawMessage(`{"teams":1,"routes_per_team":0,"leaf_sim":{"latency_ms":0,"jitter_ms":0,"failure_rate":0}}`)})
	require.NoError(t, err)
	pg := postmaster(t, first.database)
	first.interrupt(t)
	require.Empty(t, inGroup(pg), "no postgres process is left after the first run")
	_, err = os.Stat(filepath.Join(dataDir, "PG_VERSION"))
	require.NoError(t, err, "--data-dir is kept")

	second := start(t, args("--data-dir", dataDir, "--no-sample")...)
	st = openStore(t, second.database)
	r, err := st.GetResource(ctx, "bom", "keepme")
	require.NoError(t, err, "the second run sees the first run's resource")
	require.Equal(t, "keepme", r.Name)
	second.interrupt(t)
}

// postmaster finds the Postgres server listening on the database URL's port.
func postmaster(t *testing.T, dbURL string) int {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	for _, pid := range pids() {
		args := cmdline(pid)
		if len(args) > 0 && strings.HasSuffix(args[0], "postgres") && flagValue(args, "-p") == u.Port() {
			return pid
		}
	}
	t.Fatalf("no postgres process serves port %s", u.Port())
	return 0
}

func pids() []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

func cmdline(pid int) []string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// stat reads a process's state, parent and process group.
func stat(pid int) (state string, ppid, pgrp int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, 0, false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:]) // comm may hold spaces
	if len(f) < 3 {
		return "", 0, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	pgrp, _ = strconv.Atoi(f[2])
	return f[0], ppid, pgrp, true
}

func alive(pid int) bool {
	state, _, _, ok := stat(pid)
	return ok && state != "Z"
}

func childrenOf(parent int) []int {
	var out []int
	for _, pid := range pids() {
		if _, ppid, _, ok := stat(pid); ok && ppid == parent && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// inGroup lists the live processes of a process group (the postmaster runs
// in its own, with every backend).
func inGroup(pgid int) []int {
	var out []int
	for _, pid := range pids() {
		if state, _, pgrp, ok := stat(pid); ok && pgrp == pgid && state != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// tailWriter keeps the last 16 KiB of the devstack's logs for failure messages.
type tailWriter struct {
	mu sync.Mutex
	b  []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if len(w.b) > 16<<10 {
		w.b = w.b[len(w.b)-16<<10:]
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

var _ io.Writer = (*tailWriter)(nil)

// TestDevstack_AddressInUseIsRefused: a second devstack on the first one's
// address (or any server there) is refused before anything starts, naming
// the address; it never takes the other server's /readyz for its own
// converge's and prints ready.
func TestDevstack_AddressInUseIsRefused(t *testing.T) {
	t.Parallel()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer other.Close()
	addr := strings.TrimPrefix(other.URL, "http://")
	cmd := exec.Command(bin.devstack, "--addr", addr, "--converge-bin", bin.converge, "--worker-bin", bin.worker)
	cmd.Env = append(os.Environ(), "LOG_LEVEL=warn")
	var stdout, stderr tailWriter
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.Error(t, err, "devstack fails on an address in use\nstdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Signal(syscall.SIGINT)
		<-done //nolint:errcheck // the test fails on the line below; the exit is moot
		t.Fatalf("devstack ran on an address in use\nstdout:\n%s\nstderr:\n%s", &stdout, &stderr)
	}
	require.NotContains(t, stdout.String(), "ready:", "devstack took another server's /readyz for its converge's")
	require.Contains(t, stderr.String(), "--addr "+addr+" is in use", "the refusal names the flag and the address")
}

// TestDevstack_NextRunSweepsWhatAKilledOneLeft: a devstack killed with
// SIGKILL cannot remove its temporary directories (the generated tokens,
// the built binaries); the next devstack removes those whose owner is gone,
// as the private Postgres' are.
func TestDevstack_NextRunSweepsWhatAKilledOneLeft(t *testing.T) {
	t.Parallel()
	first := start(t, args("--no-sample")...)
	var creds string
	for _, pid := range childrenOf(first.cmd.Process.Pid) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(b), "\x00") {
			if v, ok := strings.CutPrefix(kv, "WORKER_TOKENS_FILE="); ok {
				creds = filepath.Dir(v)
			}
		}
	}
	require.NotEmpty(t, creds, "converge runs with the generated WORKER_TOKENS_FILE")
	children := childrenOf(first.cmd.Process.Pid)
	require.NoError(t, first.cmd.Process.Kill())
	<-first.done //nolint:errcheck // killed: the exit is SIGKILL's
	apptest.WaitFor(t, 90*time.Second, "the killed devstack's children exit (they get SIGTERM when it dies)", func() bool {
		for _, pid := range children {
			if alive(pid) {
				return false
			}
		}
		return true
	})
	_, err := os.Stat(creds)
	require.NoError(t, err, "a killed devstack leaves its credentials directory behind")

	second := start(t, args("--no-sample")...)
	_, err = os.Stat(creds)
	require.True(t, os.IsNotExist(err), "the next devstack removed %s (its owner is gone): %v", creds, err)
	second.interrupt(t)
}
