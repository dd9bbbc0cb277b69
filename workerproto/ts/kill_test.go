package ts_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/db/pgtest"
)

// TestHelperProcess is not a test: TestTSWorker_BrokerKilled re-executes the
// test binary with CONVERGE_HELPER=server to run converge in a process of
// its own, which it can SIGKILL.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("CONVERGE_HELPER") != "server" {
		t.Skip("helper process for TestTSWorker_BrokerKilled; runs only when re-executed by it")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := config.FromEnv("test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2) //nolint:gocritic // a helper process exits at once; stop() is moot
	}
	err = app.Run(ctx, cfg, apptest.StderrLogger(), app.Options{Tune: func(_ *app.Process, d *app.Duties) {
		if d.Reaper != nil {
			// A lease outlives a broker restart by far in production; keep it
			// so here, or the successor re-runs the task before the worker
			// has reconnected to redeliver.
			d.Reaper.Every, d.Reaper.StaleAfter, d.Reaper.RetryAfter = 200*time.Millisecond, 5*time.Minute, time.Second
		}
	}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// spawnServer runs converge (ROLE=all: API, probes and broker on port) in a
// child process, and waits for it to be ready.
func spawnServer(t *testing.T, db string, port int) *exec.Cmd {
	t.Helper()
	dir := t.TempDir()
	workerTokens, meshTokens := filepath.Join(dir, "worker-tokens"), filepath.Join(dir, "mesh-tokens")
	require.NoError(t, os.WriteFile(workerTokens, []byte(apptest.WorkerToken+" ts-worker\n"), 0o600))
	require.NoError(t, os.WriteFile(meshTokens, []byte(apptest.MeshToken+" ts-mesh\n"), 0o600))
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run", "^TestHelperProcess$")
	cmd.Env = append(os.Environ(), "CONVERGE_HELPER=server", "DATABASE_URL="+db, "ROLE=all",
		fmt.Sprintf("LISTEN_ADDR=127.0.0.1:%d", port), fmt.Sprintf("HEALTH_ADDR=127.0.0.1:%d", port),
		"WORKER_TOKENS_FILE="+workerTokens, "MESH_TOKENS_FILE="+meshTokens, "MEMBER_HEARTBEAT_EVERY=1s", "SHUTDOWN_DRAIN=5s")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	apptest.WaitFor(t, apptest.BootWithin, "the converge child is ready", func() bool {
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return cmd
}

// TestTSWorker_BrokerKilledWithAResultInFlightRedeliversToItsSuccessor: the
// broker process is SIGKILLed right as the TypeScript worker finishes a
// task; the result, never acknowledged, is redelivered to the successor on
// the same address, and the resource converges with it.
func TestTSWorker_BrokerKilledWithAResultInFlightRedeliversToItsSuccessor(t *testing.T) {
	t.Parallel()
	build(t)
	db := pgtest.URL(t)
	port := freePort(t)
	first := spawnServer(t, db, port)
	st := store.New(pgtest.PoolFor(t, db), nil)
	for _, m := range manifestDocs(t) {
		_, _, err := st.ApplyManifest(context.Background(), m)
		require.NoError(t, err)
	}
	w := startWorker(t, fmt.Sprintf("BROKER_URL=http://127.0.0.1:%d", port), "WORKER_TOKEN="+apptest.WorkerToken, "LOG_FORMAT=json")
	gateFile := filepath.Join(t.TempDir(), "open")
	applyAll(t, st, "tsgate", map[string]string{"inflight": fmt.Sprintf(`{"mode":"gate","gate_file":%q}`, gateFile)})
	apptest.WaitFor(t, time.Minute, "the task reached the worker", func() bool {
		return w.has(map[string]any{"event": "start", "name": "inflight"})
	})

	// The worker finishes as the broker dies: the result lands in the dying
	// broker, its dead connection or the worker's buffer; unacked, the
	// worker keeps it and redelivers it to the successor.
	require.NoError(t, os.WriteFile(gateFile, nil, 0o600))
	require.NoError(t, first.Process.Kill())
	spawnServer(t, db, port)
	r := apptest.WaitPhase(t, st, "tsgate", "inflight", resource.PhaseReady, 2*time.Minute)
	require.GreaterOrEqual(t, w.logged("connected to broker"), 2, "the worker reconnected")
	// The result is redelivered unless the dying broker acked it first.
	redelivered := w.loggedField("connected to broker", "redelivering", 1)
	t.Logf("the unacked result was redelivered to the successor: %v", redelivered)
	// The reconnecting worker names the task whose result awaits its ack in
	// its Subscribe, and the successor adopts that lease before it makes the
	// worker routable: the freed lease is not claimed afresh (a new claim
	// epoch would fence the redelivered result out), so the task runs once.
	require.False(t, w.has(map[string]any{"event": "start", "name": "inflight", "attempt": 2}),
		"the task was re-run instead of its result being applied")
	requireStatus(t, r, `{"attempts":1,"lease":true}`)
}

// loggedField reports whether a log line with message msg has field = v.
func (w *nodeWorker) loggedField(msg, field string, v any) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, l := range w.logs {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && rec["message"] == msg && fmt.Sprint(rec[field]) == fmt.Sprint(v) {
			return true
		}
	}
	return false
}
