package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/resolvers"
)

// gateKind is a leaf whose work, teardown and ping each wait for the test
// to open their gate, so a wait is certainly under way during an outage.
const gateKind = `{"kind":"gate","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]},
              {"name":"teardown","trigger":"deleteRequested","emits":["finalizer"]},
              {"name":"ping","trigger":"operation","verb":"ping","emits":["operationOutput"]}],
 "finalizer_name":"test.converge.dev/gate"}`

// gates hold each (stage, resource) of the gate kind until opened.
type gates struct {
	mu sync.Mutex
	m  map[string]*gate
}

type gate struct {
	open, started chan struct{}
	once          sync.Once
}

func (g *gates) get(st worker.Stage, name string) *gate {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := string(st) + "/" + name
	if g.m[k] == nil {
		g.m[k] = &gate{open: make(chan struct{}), started: make(chan struct{})}
	}
	return g.m[k]
}

func (g *gates) work(ctx context.Context, r worker.Request) (worker.Outcome, error) {
	gt := g.get(r.Stage, r.Resource.Name)
	gt.once.Do(func() { close(gt.started) })
	select {
	case <-gt.open:
	case <-ctx.Done():
		return worker.Outcome{}, ctx.Err()
	}
	switch r.Stage {
	case worker.StageDelete:
		return worker.Outcome{}, nil
	case worker.StageOperate:
		return worker.Outcome{OperationOutput: json.RawMessage(`{"pong":true}`)}, nil
	}
	return worker.Outcome{Status: json.RawMessage(`{"ok":true}`)}, nil
}

// waitStarted waits for the stage's task on name to reach the provider.
func (g *gates) waitStarted(t *testing.T, st worker.Stage, name string) {
	t.Helper()
	select {
	case <-g.get(st, name).started:
	case <-time.After(60 * time.Second):
		t.Fatalf("no %s task on %s reached the provider", st, name)
	}
}

func (g *gates) release(st worker.Stage, name string) { close(g.get(st, name).open) }

// restartable is a stack whose API process (the one conctl talks to) can be
// stopped and started again on the same address, as a pod restart does; a
// second process runs the broker and the worker. The stopped process's
// websockets stay open and silent, as those of a server that drains before
// it exits do.
type restartable struct {
	*apptest.Stack
	listen string // the next API process's ListenAddr ("" = a free port)
	stop   func()
}

func startRestartable(t *testing.T, g *gates) *restartable {
	t.Helper()
	r := &restartable{}
	r.Stack = apptest.Start(t, apptest.Options{
		Version:   "v-test",
		GraphQL:   resolvers.Mount(resolvers.MountOptions{}),
		Manifests: []string{gateKind},
		Workers:   []apptest.Worker{{Providers: []worker.Provider{apptest.NewProvider("gate", g.work)}}},
		Config: func(c *config.Config) {
			if r.listen != "" {
				c.ListenAddr = r.listen
			}
		},
	})
	api, stop := r.StartProcess(config.RoleControl)
	r.stop, r.listen = stop, api.Addr("api").String()
	return r
}

// server is the API process's base URL (the same across restarts).
func (r *restartable) server() string { return "http://" + r.listen }

// restart stops the API process and starts a new one on the same address.
func (r *restartable) restart() { r.stop(); _, r.stop = r.StartProcess(config.RoleControl) }

// background is a conctl run in the background.
type background struct {
	out, err syncBuffer
	done     chan int
}

func runBackground(server, stdin string, args ...string) *background {
	b := &background{done: make(chan int, 1)}
	go func() { b.done <- cli.Run(context.Background(), testEnv(server, stdin, &b.out, &b.err), args) }()
	return b
}

// result waits for the run to end.
func (b *background) result(t *testing.T) result {
	t.Helper()
	select {
	case code := <-b.done:
		return result{code: code, stdout: b.out.String(), stderr: b.err.String()}
	case <-time.After(3 * time.Minute):
		t.Fatalf("conctl did not end within 3m\nstdout:\n%s\nstderr:\n%s", b.out.String(), b.err.String())
	}
	return result{}
}

// waitFor waits until cond holds, or the run ended (a failure: its output
// says why).
func (b *background) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		select {
		case code := <-b.done:
			b.done <- code
			t.Fatalf("conctl ended (%d) before %s\nstdout:\n%s\nstderr:\n%s", code, what, b.out.String(), b.err.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s after 60s\nstdout:\n%s\nstderr:\n%s", what, b.out.String(), b.err.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// apply --wait, delete --wait and run --wait each outlive an outage of the
// server they wait on: a restart of it (its old websocket left open and
// silent, as a draining server's is, until it exits), or a network that
// drops every connection and refuses new ones until a read of the wait has
// failed. Each ends 0 once what it waits for happens after the outage.
func TestWait_OutlivesAServerOutage(t *testing.T) {
	t.Parallel()
	g := &gates{m: map[string]*gate{}}
	s := startRestartable(t, g)
	proxy := startProxy(t, s.listen)
	outages := []struct {
		name string
		// server is where conctl goes; during runs between the task's start
		// and its release.
		server func() string
		during func(t *testing.T, b *background)
	}{
		{"restart", s.server, func(*testing.T, *background) { s.restart() }},
		{"unreachable", proxy.URL, func(t *testing.T, b *background) {
			before := proxy.refusedPOSTCount()
			proxy.pause()
			defer proxy.resume()
			b.waitFor(t, "a read refused during the outage", func() bool { return proxy.refusedPOSTCount() > before })
		}},
	}
	cmds := []struct {
		name  string
		stage worker.Stage
		setup func(t *testing.T, server, res string)
		args  func(res string) (stdin string, args []string)
		// waiting is what conctl prints once it waits
		waiting string
		stdout  string
	}{
		{name: "apply", stage: worker.StageWork,
			args: func(res string) (string, []string) {
				return `{"kind":"gate","name":"` + res + `","spec":{}}`, []string{"apply", "-f", "-", "--wait", "--timeout", "1m"}
			},
			waiting: " RECONCILING\n", stdout: "is READY"},
		{name: "delete", stage: worker.StageDelete, setup: ready(g),
			args: func(res string) (string, []string) {
				return "", []string{"delete", "gate/" + res, "--wait", "--timeout", "1m"}
			},
			waiting: "deletion requested", stdout: "deleted\n"},
		{name: "run", stage: worker.StageOperate, setup: ready(g),
			args: func(res string) (string, []string) {
				return "", []string{"run", "ping", "gate/" + res, "--wait", "--timeout", "1m"}
			},
			waiting: " RUNNING\n", stdout: "SUCCEEDED"},
	}
	for _, o := range outages {
		for _, c := range cmds {
			t.Run(c.name+"/"+o.name, func(t *testing.T) {
				res := c.name + "-" + o.name
				server := o.server()
				if c.setup != nil {
					c.setup(t, server, res)
				}
				stdin, args := c.args(res)
				b := runBackground(server, stdin, args...)
				g.waitStarted(t, c.stage, res)
				b.waitFor(t, "waiting", func() bool { return strings.Contains(b.out.String()+b.err.String(), c.waiting) })
				o.during(t, b)
				g.release(c.stage, res)
				r := b.result(t)
				require.Equalf(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
				require.Contains(t, r.stdout, c.stdout)
				if o.name == "unreachable" {
					require.Contains(t, r.stderr, "(trying again)", "the failed read is said, not silently retried")
				}
			})
		}
	}
}

// ready applies a gate resource and waits until it is READY.
func ready(g *gates) func(t *testing.T, server, res string) {
	return func(t *testing.T, server, res string) {
		t.Helper()
		g.release(worker.StageWork, res)
		must(t, runConctl(context.Background(), server, `{"kind":"gate","name":"`+res+`","spec":{}}`, "apply", "-f", "-", "--wait", "--timeout", "2m"))
	}
}

// A wait whose first read finds the server unreachable tries it again, as
// its later reads are, until --timeout: here the websocket every wait
// starts with is refused (its upgrade closed unanswered) while the request
// before it went through, as when the server restarts right after the
// apply. The first read failed the wait at once ("wait for gate/…: dial
// …: connection reset by peer", exit 1) while a later one was retried.
func TestWait_FirstReadOutlivesAnUnreachableServer(t *testing.T) {
	t.Parallel()
	g := &gates{m: map[string]*gate{}}
	s := startRestartable(t, g)
	for _, c := range []struct {
		name   string
		stage  worker.Stage
		setup  func(t *testing.T, server, res string)
		args   func(res string) (stdin string, args []string)
		stdout string
	}{
		{name: "apply", stage: worker.StageWork,
			args: func(res string) (string, []string) {
				return `{"kind":"gate","name":"` + res + `","spec":{}}`, []string{"apply", "-f", "-", "--wait", "--timeout", "1m"}
			},
			stdout: "is READY"},
		{name: "run", stage: worker.StageOperate, setup: ready(g),
			args: func(res string) (string, []string) {
				return "", []string{"run", "ping", "gate/" + res, "--wait", "--timeout", "1m"}
			},
			stdout: "SUCCEEDED"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res := "first-" + c.name
			if c.setup != nil {
				c.setup(t, s.server(), res)
			}
			proxy := startProxy(t, s.listen)
			proxy.refuseUpgrades(true)
			stdin, args := c.args(res)
			b := runBackground(proxy.URL(), stdin, args...)
			b.waitFor(t, "the first read refused twice", func() bool { return proxy.refusedGETCount() >= 2 })
			proxy.refuseUpgrades(false)
			g.release(c.stage, res)
			r := b.result(t)
			require.Equalf(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			require.Contains(t, r.stdout, c.stdout)
			require.Equal(t, 1, strings.Count(r.stderr, "(trying again)"), "the outage is said once: %s", r.stderr)
		})
	}
}
