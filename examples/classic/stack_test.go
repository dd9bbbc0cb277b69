package classic_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testLog is quiet unless CONVERGE_TEST_LOG=debug.
func testLog() zerolog.Logger {
	if os.Getenv("CONVERGE_TEST_LOG") == "debug" {
		return zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr}).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	}
	return zerolog.Nop()
}

// startConverge runs a real converge process (ROLE=all, app.Run) on a fresh
// database and returns it once ready; it stops when the test ends.
func startConverge(t *testing.T) *app.Process {
	t.Helper()
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
	}, "test")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan *app.Process, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, cfg, testLog(), app.Options{
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
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("converge did not become ready")
	}
	require.Eventually(t, func() bool { _, _, ok := p.Shards.Bounds(); return ok }, 20*time.Second, 10*time.Millisecond,
		"the member gets its shard range")
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(60 * time.Second):
			t.Error("converge did not stop")
		}
	})
	return p
}

// brokerURL is where workers dial the process's broker.
func brokerURL(p *app.Process) string {
	a := p.Addr("broker")
	if a == nil {
		a = p.Addr("api")
	}
	return "http://" + a.String()
}

// serve runs providers against the broker until the test ends.
func serve(t *testing.T, url string, ps ...worker.Provider) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = worker.Serve(ctx, url, worker.Options{MaxParallel: 64, DrainTimeout: 5 * time.Second,
			ReconnectMax: 500 * time.Millisecond, Logger: testLog()}, ps...)
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
}

// waitPhase waits until kind/name reaches phase.
func waitPhase(t *testing.T, st *store.Store, kind, name string, phase resource.Phase, within time.Duration) resource.Resource {
	t.Helper()
	deadline := time.Now().Add(within)
	var last resource.Resource
	for time.Now().Before(deadline) {
		r, err := st.GetResource(context.Background(), kind, name)
		if err == nil {
			last = r
			if r.Phase == phase {
				return r
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s/%s did not reach %s within %s; last phase %q status %s", kind, name, phase, within, last.Phase, last.Status)
	return last
}
