package app_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/cluster"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

// probe is a GET of base+path: its status and body.
func probe(t *testing.T, base, path string) (int, string) {
	t.Helper()
	res, err := http.Get(base + path)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// A member that has begun to shut down (SIGTERM, or an admin's drain) takes
// no new work: its broker claims nothing and ends its workers' sessions.
// /readyz says so for the whole drain, so a load balancer (or a Service for
// an admin's drain, which Kubernetes does not know of) sends it no new
// worker sessions or requests; /livez still answers, or the drain would be
// cut short by a restart. /readyz answered 200 until the listener closed.
func TestProcess_ReadyzSaysDrainingWhileTheMemberDrains(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.DatabaseURL, cfg.ListenAddr, cfg.HealthAddr = pgtest.URL(t), "127.0.0.1:0", "127.0.0.1:0"
	cfg.HeartbeatEvery, cfg.ShutdownDrain = time.Second, 2*time.Minute
	require.NoError(t, cfg.Validate())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, done := runConverge(t, ctx, cfg)
	base := apptest.APIURL(p)
	code, body := probe(t, base, "/readyz")
	require.Equal(t, http.StatusOK, code, body)

	release := holdATask(t, p)

	cancel() // SIGTERM: the broker drains, its task held by the worker
	apptest.WaitFor(t, 10*time.Second, "/readyz says the member is draining", func() bool {
		code, body = probe(t, base, "/readyz")
		return code == http.StatusServiceUnavailable
	})
	require.True(t, strings.Contains(body, "draining"), "/readyz: %q", body)
	code, body = probe(t, base, "/livez")
	require.Equal(t, http.StatusOK, code, "/livez while draining: %s", body)
	select {
	case err := <-done:
		t.Fatalf("the member stopped before its task finished: %v", err)
	default:
	}

	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(apptest.StopWithin):
		t.Fatalf("did not stop within %s", apptest.StopWithin)
	}
}

// holdATask applies a leaf whose work a worker holds until the returned
// channel is closed, and returns once the task reached the worker: a drain
// that waits for it lasts as long as the test wants.
func holdATask(t *testing.T, p *app.Process) (release chan struct{}) {
	t.Helper()
	applyManifest(t, p.Store, leafKind)
	running, release := make(chan struct{}, 1), make(chan struct{})
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, apptest.NewProvider("leaf",
		func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
			if r.Stage == worker.StageWork {
				running <- struct{}{}
				select {
				case <-release:
				case <-ctx.Done():
					return worker.Outcome{}, ctx.Err()
				}
			}
			return leafWork(ctx, r)
		}))
	applyResource(t, p.Store, "leaf", "held", `{}`)
	select {
	case <-running:
	case <-time.After(90 * time.Second):
		t.Fatal("the task never reached the worker")
	}
	return release
}

// heldRegistry holds the member's registration until open is closed.
type heldRegistry struct {
	cluster.Registry
	open <-chan struct{}
}

func (h heldRegistry) Upsert(ctx context.Context, m membership.Member) (time.Time, error) {
	select {
	case <-h.open:
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	return h.Registry.Upsert(ctx, m)
}

// Between the listeners binding and the member's first registration the
// process owns no shards and its peers do not know it: /readyz says it is
// starting, so a rolling update does not count it available (and stop an
// old pod) before it has joined. /readyz answered 200 from the moment the
// listener was bound.
func TestProcess_ReadyzSaysStartingUntilTheMemberRegisters(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.DatabaseURL, cfg.ListenAddr, cfg.HealthAddr = pgtest.URL(t), "127.0.0.1:0", "127.0.0.1:0"
	require.NoError(t, cfg.Validate())
	ctx, cancel := context.WithCancel(context.Background())
	open := make(chan struct{})
	tuned := make(chan *app.Process, 1)
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, cfg, apptest.Logger(t), app.Options{
			Tune: func(p *app.Process, d *app.Duties) {
				d.Reporter.Registry = heldRegistry{Registry: d.Reporter.Registry, open: open}
				tuned <- p
			},
			OnStart: func(*app.Process) { close(started) },
		})
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(apptest.StopWithin):
			t.Errorf("did not stop within %s", apptest.StopWithin)
		}
	})
	var p *app.Process
	select {
	case p = <-tuned:
	case err := <-done:
		t.Fatalf("converge exited during start-up: %v", err)
	case <-time.After(apptest.BootWithin):
		t.Fatal("converge did not boot")
	}
	apptest.WaitFor(t, 30*time.Second, "the API listener is bound", func() bool { return p.Addr("api") != nil })
	base := apptest.APIURL(p)
	code, body := probe(t, base, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, "/readyz before the member registered: %s", body)
	require.Contains(t, body, "starting")

	close(open)
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the member did not register")
	}
	code, body = probe(t, base, "/readyz")
	require.Equal(t, http.StatusOK, code, "/readyz once registered: %s", body)
}

// /readyz says whether the primary answers, not whether the process's pool
// has a connection free: with every connection of the primary pool busy
// (a burst of claims, drains and API reads) the database still answers, on
// the liveness lock's own connection, checked four times a second. /readyz
// pinged through the pool, waited its 2 s for a connection and answered
// 503 "the primary database does not answer": every pod under the same
// burst left the endpoints at once.
func TestProcess_ReadyzStaysReadyWithEveryPoolConnectionBusy(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	base := apptest.APIURL(p)
	var held []*pgxpool.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Release()
		}
	})
	// Take every connection the process is not holding itself (its LISTEN
	// connection, its liveness lock's).
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := p.Primary.Acquire(ctx)
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			break
		}
		held = append(held, c)
	}
	require.NotEmpty(t, held)
	code, body := probe(t, base, "/readyz")
	require.Equal(t, http.StatusOK, code, "/readyz with the pool busy: %s", body)
}

// runConverge runs converge with cfg until ctx ends and returns it once it
// started; done reports app.Run's return.
func runConverge(t *testing.T, ctx context.Context, cfg config.Config, mounts ...app.Mount) (*app.Process, <-chan error) {
	t.Helper()
	started := make(chan *app.Process, 1)
	done := make(chan error, 1)
	go func() {
		done <- app.Run(ctx, cfg, apptest.Logger(t), app.Options{Mounts: mounts, OnStart: func(p *app.Process) { started <- p }})
	}()
	select {
	case p := <-started:
		return p, done
	case err := <-done:
		t.Fatalf("converge exited during start-up: %v", err)
	case <-time.After(apptest.BootWithin):
		t.Fatal("converge did not start")
	}
	return nil, nil
}

// The OnDrain hooks run once, when the shutdown begins — while the duties
// still drain (a task held by its worker) and the listeners still serve —
// not when the process ends: the API closes its websockets there, since
// their hub stops with the duties.
func TestProcess_OnDrainHooksRunWhenTheShutdownBegins(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.DatabaseURL, cfg.ListenAddr, cfg.HealthAddr = pgtest.URL(t), "127.0.0.1:0", "127.0.0.1:0"
	cfg.HeartbeatEvery, cfg.ShutdownDrain = time.Second, 2*time.Minute
	require.NoError(t, cfg.Validate())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	drained := make(chan struct{})
	mount := func(_ *http.ServeMux, p *app.Process) error {
		p.OnDrain(func() {
			if calls.Add(1) == 1 {
				close(drained)
			}
		})
		return nil
	}
	p, done := runConverge(t, ctx, cfg, mount)
	base := apptest.APIURL(p)

	release := holdATask(t, p)
	require.Zero(t, calls.Load(), "no hook before the shutdown")

	cancel() // SIGTERM: the broker drains, its task held by the worker
	select {
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("the OnDrain hook did not run when the shutdown began")
	}
	code, body := probe(t, base, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, code, "the hook ran with /readyz draining: %s", body)
	select {
	case err := <-done:
		t.Fatalf("the process ended before its task finished: %v", err)
	default:
	}

	close(release)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(apptest.StopWithin):
		t.Fatalf("did not stop within %s", apptest.StopWithin)
	}
	require.EqualValues(t, 1, calls.Load(), "the hook runs once")
}
