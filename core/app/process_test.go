package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/loopback"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/shard"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/membership"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

// TestHelperProcess is not a test: the process tests re-execute the test
// binary with CONVERGE_HELPER set to run a real converge server or a worker
// in a process of its own, which they can SIGKILL.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv("CONVERGE_HELPER")
	if mode == "" {
		t.Skip("helper process for the process tests; runs only when re-executed by them")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go exitWithParent(os.Getppid())
	switch mode {
	case "server":
		cfg, err := config.FromEnv("test")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2) //nolint:gocritic // a helper process exits at once; stop() is moot
		}
		log := apptest.StderrLogger()
		if os.Getenv("HELPER_LOG") == "json" { // the outage test counts the lines
			log = zerolog.New(os.Stderr).Level(zerolog.InfoLevel).With().Timestamp().Logger()
		}
		err = app.Run(ctx, cfg, log, app.Options{Tune: func(p *app.Process, d *app.Duties) {
			if d.Reaper != nil {
				d.Reaper.Every = 200 * time.Millisecond
				d.Reaper.StaleAfter = 3 * time.Second
				if v, err := time.ParseDuration(os.Getenv("HELPER_STALE_AFTER")); err == nil {
					d.Reaper.StaleAfter = v
				}
				d.Reaper.RetryAfter = time.Second
			}
			if p.Broker != nil {
				p.Broker.HeartbeatEvery = 500 * time.Millisecond
			}
		}})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case "worker":
		marker := os.Getenv("HELPER_MARKER")
		p := apptest.NewProvider("leaf", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
			_ = os.WriteFile(marker, []byte(r.Resource.Name), 0o644)
			<-ctx.Done() // hang until killed
			return worker.Outcome{}, ctx.Err()
		})
		parallel, _ := strconv.Atoi(os.Getenv("HELPER_MAX_PARALLEL")) // 0: the default
		_ = worker.Serve(ctx, os.Getenv("HELPER_BROKER_URL"), worker.Options{ReconnectMax: 200 * time.Millisecond,
			Token: os.Getenv("HELPER_WORKER_TOKEN"), MaxParallel: parallel}, p)
		os.Exit(0)
	case "crasher": // a leaf worker whose process dies on the resource HELPER_POISON
		p := apptest.NewProvider("leaf", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
			if r.Resource.Name == os.Getenv("HELPER_POISON") {
				os.Exit(3)
			}
			return leafWork(ctx, r)
		})
		_ = worker.Serve(ctx, os.Getenv("HELPER_BROKER_URL"), worker.Options{ReconnectMax: 200 * time.Millisecond,
			Token: os.Getenv("HELPER_WORKER_TOKEN")}, p)
		os.Exit(0)
	}
}

// exitWithParent ends a helper process once the test binary that spawned it
// is gone (its parent changes): a binary killed by a timeout or a signal
// never runs the cleanup that would have killed its helpers, which would
// otherwise run on, retrying a database that is gone.
func exitWithParent(parent int) {
	tick := time.NewTicker(250 * time.Millisecond) // runs until the process ends
	for range tick.C {
		if os.Getppid() != parent {
			os.Exit(2)
		}
	}
}

// child is a helper process.
type child struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func spawn(t *testing.T, env ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run", "^TestHelperProcess$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(c.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

func (c *child) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Kill())
	<-c.done
}

func (c *child) term(t *testing.T) {
	t.Helper()
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		t.Fatal("helper did not exit on SIGTERM")
	}
}

// freePort is a loopback port for a helper process to listen on, which no
// outgoing connection can take before it binds it (core/loopback).
func freePort(t *testing.T) int {
	t.Helper()
	p, err := loopback.FreePort("")
	require.NoError(t, err)
	return p
}

// spawnServer starts a converge process with role on dbURL; addr is its
// LISTEN_ADDR (the API, or the broker listener of a broker) and probes the
// port /readyz answers on. Its worker plane takes the harness's tokens
// (apptest.WorkerToken, apptest.MeshToken), like an in-process stack's.
func spawnServer(t *testing.T, dbURL string, role config.Role, listen, probes int, env ...string) *child {
	t.Helper()
	dir := t.TempDir()
	workerTokens, meshTokens := filepath.Join(dir, "worker-tokens"), filepath.Join(dir, "mesh-tokens")
	require.NoError(t, os.WriteFile(workerTokens, []byte(apptest.WorkerToken+" helper-worker\n"), 0o600))
	require.NoError(t, os.WriteFile(meshTokens, []byte(apptest.MeshToken+" helper-mesh\n"), 0o600))
	env = append([]string{"WORKER_TOKENS_FILE=" + workerTokens, "MESH_TOKENS_FILE=" + meshTokens}, env...)
	c := spawn(t, append([]string{"CONVERGE_HELPER=server", "DATABASE_URL=" + dbURL, "ROLE=" + string(role),
		fmt.Sprintf("LISTEN_ADDR=127.0.0.1:%d", listen), fmt.Sprintf("HEALTH_ADDR=127.0.0.1:%d", probes),
		"MEMBER_HEARTBEAT_EVERY=1s", "SHUTDOWN_DRAIN=5s"}, env...)...)
	require.Eventually(t, func() bool {
		res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probes))
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	}, apptest.BootWithin, 20*time.Millisecond, "converge %s on :%d never became ready", role, listen)
	return c
}

func TestProcess_WorkerKilledMidTaskReRunsElsewhere(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, leafKind)
	marker := filepath.Join(t.TempDir(), "got-task")
	doomed := spawn(t, "CONVERGE_HELPER=worker", "HELPER_BROKER_URL="+apptest.BrokerURL(p), "HELPER_MARKER="+marker,
		"HELPER_WORKER_TOKEN="+apptest.WorkerToken)
	applyResource(t, p.Store, "leaf", "survivor", `{}`)
	require.Eventually(t, func() bool { _, err := os.Stat(marker); return err == nil }, 90*time.Second, 10*time.Millisecond,
		"the first worker received the task")

	var calls atomic.Int32
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, apptest.NewProvider("leaf", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
		calls.Add(1)
		return leafWork(ctx, r)
	}))
	doomed.kill(t)
	r := apptest.WaitPhase(t, p.Store, "leaf", "survivor", resource.PhaseReady, 90*time.Second)
	require.Equal(t, "id-survivor", status(t, r)["id"])
	require.EqualValues(t, 1, calls.Load(), "the task re-ran once on the surviving worker")
}

func TestProcess_BrokerKilledWithAResultInFlightRedeliversToItsSuccessor(t *testing.T) {
	t.Parallel()
	brokerKilledRedelivers(t)
}

// The same on an open worker plane (WORKER_AUTH=none, no mesh tokens): the
// successor is another broker process, and it accepts the redelivered
// result because the lease secret was issued with the cluster's shared key
// (lease_keys), not a key of the dead process's own.
func TestProcess_OpenPlaneRedeliveryToAnotherBrokerIsAccepted(t *testing.T) {
	t.Parallel()
	brokerKilledRedelivers(t, "WORKER_TOKENS_FILE=", "MESH_TOKENS_FILE=", "WORKER_AUTH=none")
}

// brokerKilledRedelivers kills the broker a worker's result is in flight to
// and checks the successor (a new process on the same address, started
// with env) applies the redelivered result without re-running the task.
func brokerKilledRedelivers(t *testing.T, env ...string) {
	db := pgtest.URL(t)
	port := freePort(t)
	// A lease outlives a broker restart by far in production; keep it
	// so here, or the successor's reaper re-runs the task before the worker
	// has reconnected to redeliver.
	env = append([]string{"HELPER_STALE_AFTER=5m"}, env...)
	first := spawnServer(t, db, config.RoleAll, port, port, env...)
	st := store.New(pgtest.PoolFor(t, db), nil)
	applyManifest(t, st, leafKind)

	started := make(chan struct{}, 1)
	release := make(chan struct{})
	var calls atomic.Int32
	apptest.StartWorker(t, fmt.Sprintf("http://127.0.0.1:%d", port), worker.Options{}, apptest.NewProvider("leaf", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
		calls.Add(1)
		started <- struct{}{}
		<-release
		return leafWork(ctx, r)
	}))
	applyResource(t, st, "leaf", "inflight", `{}`)
	select {
	case <-started:
	case <-time.After(90 * time.Second):
		t.Fatal("the task never reached the worker")
	}
	// The broker dies right as the result is sent: the send may land in the
	// dying broker (read, maybe even written), in its dead connection, or
	// in the worker's buffer. Whichever, the result was never acked, so the
	// worker keeps it and redelivers it to the successor.
	close(release)
	first.kill(t)

	// The successor comes up on the same address; the worker reconnects and
	// redelivers the unacked result, which the claim_epoch fence applies
	// once (a copy the dead broker already wrote is fenced as stale).
	spawnServer(t, db, config.RoleAll, port, port, env...)
	r := apptest.WaitPhase(t, st, "leaf", "inflight", resource.PhaseReady, 90*time.Second)
	require.Equal(t, "id-inflight", status(t, r)["id"])
	require.EqualValues(t, 1, calls.Load(), "the result was delivered, not recomputed")
}

// tiled reports whether the live members of role tile [0,256) disjointly.
func tiled(t *testing.T, ms *membership.Store, role string, want int) bool {
	t.Helper()
	members, err := ms.List(context.Background())
	require.NoError(t, err)
	var spans []shard.Range
	for _, m := range members {
		if m.Role != role || time.Since(m.LastHeartbeat) > 3*time.Second || m.Shards == nil || m.Shards.Empty() {
			continue
		}
		spans = append(spans, *m.Shards)
	}
	if len(spans) != want {
		return false
	}
	covered := make([]int, 256)
	for _, s := range spans {
		for i := s.Lo; i < s.Hi; i++ {
			covered[i]++
		}
	}
	for _, n := range covered {
		if n != 1 {
			return false
		}
	}
	return true
}

func TestProcess_BrokersAndControlsTileAndRetileUnderLoad(t *testing.T) {
	t.Parallel()
	db := pgtest.URL(t)
	pool := pgtest.PoolFor(t, db)
	st := store.New(pool, nil)
	ms := membership.New(pool)
	applyManifest(t, st, leafKind)

	type brk struct {
		c    *child
		port int
	}
	var brokers []brk
	for range 3 {
		port := freePort(t)
		brokers = append(brokers, brk{c: spawnServer(t, db, config.RoleBroker, port, freePort(t)), port: port})
	}
	var controls []*child
	for range 2 {
		port := freePort(t)
		controls = append(controls, spawnServer(t, db, config.RoleControl, port, port))
	}
	var calls leafCalls
	for _, b := range brokers {
		apptest.StartWorker(t, fmt.Sprintf("http://127.0.0.1:%d", b.port), worker.Options{MaxParallel: 64}, calls.provider())
	}
	require.Eventually(t, func() bool { return tiled(t, ms, "broker", 3) && tiled(t, ms, "control", 2) }, 90*time.Second,
		50*time.Millisecond, "each role tiles [0,256)")

	// Start a 5,000-resource load, then change the membership under it.
	const n = 5000
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 8 {
				if _, _, err := st.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "leaf",
					Name: "load-" + strconv.Itoa(i), Spec: json.RawMessage(`{}`)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	// A graceful leave: how soon it re-tiles is
	// TestProcess_ASIGTERMedBrokersShardsReTileToItsPeersAtOnce's (here the
	// 1 s beats' 3 s window would re-tile within any bound worth checking).
	brokers[2].c.term(t)
	require.Eventually(t, func() bool { return tiled(t, ms, "broker", 2) }, 10*time.Second, 50*time.Millisecond)

	brokers[1].c.kill(t) // crash: no deregistration
	controls[1].kill(t)
	require.Eventually(t, func() bool { return tiled(t, ms, "broker", 1) && tiled(t, ms, "control", 1) }, 20*time.Second,
		50*time.Millisecond, "crashed members drop out within the liveness window")

	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		counts, err := st.PhaseCounts(context.Background(), "leaf")
		require.NoError(t, err)
		for _, c := range counts {
			if c.Phase == resource.PhaseReady {
				return c.Count == n
			}
		}
		return false
	}, 120*time.Second, 100*time.Millisecond, "every resource converges")
	page, err := st.ListResources(context.Background(), store.ListOptions{Kind: "leaf", Phases: []resource.Phase{resource.PhaseReconciling, resource.PhaseFailed}})
	require.NoError(t, err)
	require.Empty(t, page.Items)
	byName := calls.byName()
	require.Len(t, byName, n, "every resource was reconciled")
	var reruns int
	for _, c := range byName {
		if c > 1 {
			reruns++
		}
	}
	// A crashed broker's in-flight tasks re-run after their lease lapses
	// (at-least-once); everything else ran exactly once.
	require.LessOrEqual(t, reruns, 200, "only the crashed broker's in-flight tasks ran twice")
}
