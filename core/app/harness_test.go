package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/manifest"
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

// startServer runs a real converge process (app.Run) on dbURL with fast
// cadences and returns it once ready.
func startServer(t *testing.T, dbURL string, role config.Role, tune func(*app.Process, *app.Duties)) (*app.Process, func()) {
	t.Helper()
	cfg, err := config.Parse(func(k string) string {
		switch k {
		case "DATABASE_URL":
			return dbURL
		case "ROLE":
			return string(role)
		case "LISTEN_ADDR":
			return "127.0.0.1:0"
		case "HEALTH_ADDR":
			return "127.0.0.1:0"
		case "MEMBER_HEARTBEAT_EVERY":
			return "1s"
		case "SHUTDOWN_DRAIN":
			return "10s"
		}
		return ""
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
					d.Reaper.StaleAfter = 3 * time.Second
					d.Reaper.RetryAfter = time.Second
					d.Reaper.LifecycleStale = 2 * time.Second
				}
				if p.Broker != nil {
					p.Broker.HeartbeatEvery = 500 * time.Millisecond
					p.Broker.RedeliveryWait = 3 * time.Second
				}
				if tune != nil {
					tune(p, d)
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
	// The first beat registered the member; wait for its shard range.
	require.Eventually(t, func() bool { _, _, ok := p.Shards.Bounds(); return ok }, 20*time.Second, 10*time.Millisecond)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(60 * time.Second):
				t.Error("converge did not stop")
			}
		})
	}
	t.Cleanup(stop)
	return p, stop
}

// brokerURL is where workers dial this process's broker.
func brokerURL(p *app.Process) string {
	a := p.Addr("broker")
	if a == nil {
		a = p.Addr("api")
	}
	return "http://" + a.String()
}

// startWorker serves providers against the broker until the test ends (or
// the returned stop is called).
func startWorker(t *testing.T, url string, opts worker.Options, ps ...worker.Provider) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if opts.DrainTimeout == 0 {
		opts.DrainTimeout = 5 * time.Second
	}
	opts.ReconnectMax = 500 * time.Millisecond
	opts.HeartbeatEvery = 500 * time.Millisecond
	opts.Logger = testLog()
	go func() {
		defer close(done)
		_ = worker.Serve(ctx, url, opts, ps...)
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// fn is a provider built from functions.
type fn struct {
	kv    manifest.KindVersion
	ready atomic.Bool
	work  func(context.Context, worker.Request) (worker.Outcome, error)
}

func provider(kind string, work func(context.Context, worker.Request) (worker.Outcome, error)) *fn {
	p := &fn{kv: manifest.KindVersion{Kind: kind, Version: "v1"}, work: work}
	p.ready.Store(true)
	return p
}

func (p *fn) Kind() manifest.KindVersion { return p.kv }
func (p *fn) Work(ctx context.Context, r worker.Request) (worker.Outcome, error) {
	return p.work(ctx, r)
}
func (p *fn) OnConfig(worker.ProviderConfig) {}
func (p *fn) Ready() bool                    { return p.ready.Load() }

// applyManifest applies a manifest document.
func applyManifest(t *testing.T, st *store.Store, doc string) {
	t.Helper()
	_, _, err := st.ApplyManifest(context.Background(), []byte(doc))
	require.NoError(t, err)
}

func applyResource(t *testing.T, st *store.Store, kind, name, spec string) resource.Resource {
	t.Helper()
	r, _, err := st.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: kind, Name: name, Spec: json.RawMessage(spec)})
	require.NoError(t, err)
	return r
}

// waitPhase waits until kind/name reaches phase and returns it.
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
	var why string
	if conds, err := st.Conditions(context.Background(), last.ID); err == nil {
		for _, c := range conds {
			why += fmt.Sprintf(" [%s=%s %s: %s]", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	t.Fatalf("%s/%s did not reach %s within %s; last phase %s (gen %d synced %d failure %d)%s", kind, name, phase, within,
		last.Phase, last.Generation, last.SyncedGen, last.FailureGen, why)
	return last
}

func status(t *testing.T, r resource.Resource) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Status, &m), "status of %s/%s: %s", r.Kind, r.Name, r.Status)
	return m
}

func js(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprint("marshal: ", err))
	}
	return b
}
