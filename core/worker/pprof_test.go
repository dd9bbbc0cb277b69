package worker_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/worker"
)

// TestPprof_ServedOnLoopbackWhileRunning: with PprofAddr set, the worker
// serves Go's profiles (the goroutine profile lists the worker's session loop)
// while Run runs and stops with it; a non-loopback address and a busy one
// are refused by New, naming the variable.
func TestPprof_ServedOnLoopbackWhileRunning(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, worker.Request) (worker.Outcome, error) { return worker.Outcome{}, nil }
	w, err := worker.New("http://127.0.0.1:1", worker.Options{PprofAddr: "127.0.0.1:0",
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond}, newProvider("vpc", noop))
	require.NoError(t, err)
	require.Empty(t, w.HealthAddr(), "the profiler does not bring the probes")
	cancel, done := runWorker(t, w)

	resp, err := http.Get("http://" + w.PprofAddr() + "/debug/pprof/goroutine?debug=1")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "core/worker.(*Worker).sessions", "the worker's own goroutines are listed")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return")
	}
	_, err = http.Get("http://" + w.PprofAddr() + "/debug/pprof/")
	require.Error(t, err, "the profiler stops with Run")

	_, err = worker.New("http://127.0.0.1:1", worker.Options{PprofAddr: "0.0.0.0:0"}, newProvider("vpc", noop))
	require.ErrorContains(t, err, "WORKER_PPROF_ADDR")
	require.ErrorContains(t, err, "loopback only")

	other, err := worker.New("http://127.0.0.1:1", worker.Options{PprofAddr: "127.0.0.1:0"}, newProvider("vpc", noop))
	require.NoError(t, err)
	runWorker(t, other)
	_, err = worker.New("http://127.0.0.1:1", worker.Options{PprofAddr: other.PprofAddr()}, newProvider("vpc", noop))
	require.ErrorContains(t, err, "WORKER_PPROF_ADDR", "a busy address fails at startup")
}
