package worker_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// probe GETs path on the worker's health address.
func probe(t *testing.T, w *worker.Worker, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + w.HealthAddr() + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, strings.TrimSpace(string(body))
}

// runWorker runs w until the returned cancel; done receives Run's result.
func runWorker(t *testing.T, w *worker.Worker) (context.CancelFunc, chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx)
		close(done) // the cleanup's receive returns at once after the test's
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Logf("worker stopped: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("worker did not stop")
		}
	})
	return cancel, done
}

func TestHealth_LiveWithoutABrokerReadyOnlyWhileSubscribed(t *testing.T) {
	t.Parallel()
	// No broker listens on port 1: the worker keeps reconnecting.
	w, err := worker.New("http://127.0.0.1:1", worker.Options{HealthAddr: "127.0.0.1:0",
		ReconnectMin: 10 * time.Millisecond, ReconnectMax: 50 * time.Millisecond},
		newProvider("vpc", func(context.Context, worker.Request) (worker.Outcome, error) { return worker.Outcome{}, nil }))
	require.NoError(t, err)
	runWorker(t, w)
	code, _ := probe(t, w, "/livez")
	require.Equal(t, http.StatusOK, code, "liveness never depends on a broker")
	code, body := probe(t, w, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "not connected to a broker", body)
}

func TestHealth_ReadyWhileConnectedUnreadyOnceDraining(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	p := newProvider("vpc", func(ctx context.Context, _ worker.Request) (worker.Outcome, error) {
		started <- struct{}{}
		select {
		case <-release:
			return worker.Outcome{Status: json.RawMessage(`{}`)}, nil
		case <-ctx.Done():
			return worker.Outcome{}, ctx.Err()
		}
	})
	w, err := worker.New(b.srv.URL, worker.Options{HealthAddr: "127.0.0.1:0", DrainTimeout: 20 * time.Second,
		ReadinessEvery: 20 * time.Millisecond}, p)
	require.NoError(t, err)
	cancel, done := runWorker(t, w)
	b.next(t, "subscribe", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil })
	require.Eventually(t, func() bool { c, _ := probe(t, w, "/readyz"); return c == http.StatusOK },
		10*time.Second, 10*time.Millisecond, "ready once subscribed")

	b.send(task("inflight", "vpc", 1, 0))
	<-started
	cancel()
	require.Eventually(t, func() bool {
		c, body := probe(t, w, "/readyz")
		return c == http.StatusServiceUnavailable && strings.HasPrefix(body, "draining")
	}, 10*time.Second, 10*time.Millisecond, "a draining worker leaves the Service at once")
	code, _ := probe(t, w, "/livez")
	require.Equal(t, http.StatusOK, code, "still live while it drains")
	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after draining")
	}
	_, err = http.Get("http://" + w.HealthAddr() + "/livez")
	require.Error(t, err, "the probes stop with Run")
}

func TestHealth_ABusyAddressFailsAtStartup(t *testing.T) {
	t.Parallel()
	first, err := worker.New("http://127.0.0.1:1", worker.Options{HealthAddr: "127.0.0.1:0"},
		newProvider("vpc", func(context.Context, worker.Request) (worker.Outcome, error) { return worker.Outcome{}, nil }))
	require.NoError(t, err)
	runWorker(t, first)
	_, err = worker.New("http://127.0.0.1:1", worker.Options{HealthAddr: first.HealthAddr()},
		newProvider("vpc", func(context.Context, worker.Request) (worker.Outcome, error) { return worker.Outcome{}, nil }))
	require.ErrorContains(t, err, "WORKER_HEALTH_ADDR=")
}
