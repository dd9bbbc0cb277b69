package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/loopback"
	"github.com/converge-run/converge/db/pgtest"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/classic"
)

// mainEnv makes the re-executed test binary run the worker's main instead of
// the tests.
const mainEnv = "CLASSIC_WORKER_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(mainEnv) == "1" {
		main()
		os.Exit(0)
	}
	pgtest.Main(m)
}

// The worker process drains its running tasks on SIGTERM, and a second
// SIGTERM ends it at once with 143, saying so, instead of being swallowed
// while the drain waits for a task that takes minutes (an operator's second
// Ctrl+C, a supervisor's second TERM).
func TestWorker_ASecondSignalEndsTheDrainAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t, apptest.Options{})
	a := apply.StoreApplier{Store: s.Store, Actor: "test"}
	docs, err := classic.Documents(false)
	require.NoError(t, err)
	require.NoError(t, apply.All(ctx, a, docs))
	// Its reconcile takes ten minutes (within its 30 s task deadline, the
	// drain waits for it).
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: classic.KindAccount, Name: "slow",
		Spec: json.RawMessage(`{"team":"t","sim":{"latency_ms":600000,"jitter_ms":0,"failure_rate":0,"terminal_failure_rate":0}}`)}))

	port, err := loopback.FreePort("127.0.0.1")
	require.NoError(t, err)
	pprof := "127.0.0.1:" + strconv.Itoa(port)
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe)
	cmd.Env = []string{mainEnv + "=1", "HOME=" + t.TempDir(), "LOG_FORMAT=json",
		"BROKER_URL=" + s.BrokerURL(), "WORKER_TOKEN=" + apptest.WorkerToken,
		"WORKER_DRAIN_TIMEOUT=10m", "WORKER_PPROF_ADDR=" + pprof}
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string, 64)
	exited := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			t.Log(sc.Text())
			lines <- sc.Text()
		}
		close(lines)
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		for range lines { // drained so the reader ends
		}
	})

	// The account's reconcile is running in the worker: its handler sleeps.
	apptest.WaitFor(t, 90*time.Second, "the worker runs the slow reconcile", func() bool {
		return strings.Contains(goroutines(pprof), "examples/classic.sleep")
	})
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	waitLine(t, lines, `"in_flight":1`, "the worker drains its running task")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	var said strings.Builder
	deadline := time.After(20 * time.Second)
	var exit error
	for done := false; !done; {
		select {
		case line, ok := <-lines:
			if !ok {
				exit, done = <-exited, true
				break
			}
			said.WriteString(line + "\n")
		case <-deadline:
			t.Fatalf("the worker still drains 20s after a second SIGTERM; it said:\n%s", said.String())
		}
	}
	var ee *exec.ExitError
	require.ErrorAs(t, exit, &ee)
	require.Equal(t, 128+int(syscall.SIGTERM), ee.ExitCode(), "it exits as a process the signal killed")
	require.Contains(t, said.String(), "classic worker: second signal (terminated): exiting now, without finishing the shutdown")
}

// goroutines is the worker's goroutine dump from its profiler ("" while it
// does not answer).
func goroutines(addr string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/goroutine?debug=1", nil)
	if err != nil {
		return ""
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return string(b)
}

// waitLine reads lines until one holds want.
func waitLine(t *testing.T, lines <-chan string, want, what string) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			require.True(t, ok, "the worker ended before: %s", what)
			if strings.Contains(line, want) {
				return
			}
		case <-deadline:
			t.Fatalf("not within 60s: %s (%s)", what, want)
		}
	}
}
