// Package ts_test runs the TypeScript worker SDK end to end: the e2e worker
// (e2e/worker.ts: the tsgreeting example and the tsprobe kind) as a real
// node process against a real converge on a private Postgres. On a fresh
// clone it installs the npm packages itself (npm ci) and builds the SDK.
// Without Node and npm on the PATH the tests that need them skip, saying
// so, as the browser and Terraform tests do without theirs — unless
// CONVERGE_REQUIRE_NODE is set (.ci/run sets it), where they fail.
package ts_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/loopback"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var (
	buildOnce sync.Once
	errBuild  error
)

// run runs a command in this directory, its output in the error.
func run(name string, args ...string) error {
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// build installs the npm packages when node_modules is missing or older
// than the lockfile, then compiles the SDK, the example and the e2e worker.
// Without node or npm on the PATH it skips the test (fails it with
// CONVERGE_REQUIRE_NODE set).
func build(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			msg := fmt.Sprintf("the TypeScript SDK's tests need Node 20.19+ and npm on PATH: %v", err)
			if os.Getenv("CONVERGE_REQUIRE_NODE") != "" {
				t.Fatal(msg + "; CONVERGE_REQUIRE_NODE is set")
			}
			t.Skip(msg)
		}
	}
	buildOnce.Do(func() {
		lock, err := os.Stat("package-lock.json")
		if err != nil {
			errBuild = err
			return
		}
		if installed, err := os.Stat("node_modules/.package-lock.json"); err != nil || installed.ModTime().Before(lock.ModTime()) {
			if errBuild = run("npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"); errBuild != nil {
				return
			}
		}
		errBuild = run("npm", "run", "build", "--silent")
	})
	require.NoError(t, errBuild)
}

// nodeWorker is the e2e worker process.
type nodeWorker struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	evs  []map[string]any
	logs []string
	done chan error
}

func startWorker(t *testing.T, env ...string) *nodeWorker {
	t.Helper()
	cmd := exec.Command("node", "dist/e2e/worker.js")
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	w := &nodeWorker{cmd: cmd, done: make(chan error, 1)}
	var wg sync.WaitGroup
	wg.Add(2)
	go w.scan(t, &wg, stdout, true)
	go w.scan(t, &wg, stderr, false)
	go func() {
		wg.Wait()
		w.done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if err := <-w.done; err != nil {
			t.Logf("node worker: %v", err)
		}
	})
	return w
}

func (w *nodeWorker) scan(t *testing.T, wg *sync.WaitGroup, r io.Reader, events bool) {
	defer wg.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		t.Log("node:", line)
		w.mu.Lock()
		var ev map[string]any
		if events && json.Unmarshal([]byte(line), &ev) == nil {
			w.evs = append(w.evs, ev)
		} else {
			w.logs = append(w.logs, line)
		}
		w.mu.Unlock()
	}
}

// has reports whether an event matching every field in want was printed.
func (w *nodeWorker) has(want map[string]any) bool { return w.find(want) != nil }

// find returns the first event matching every field in want, or nil.
func (w *nodeWorker) find(want map[string]any) map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, ev := range w.evs {
		ok := true
		for k, v := range want {
			if fmt.Sprint(ev[k]) != fmt.Sprint(v) {
				ok = false
				break
			}
		}
		if ok {
			return ev
		}
	}
	return nil
}

// logged counts the worker's log lines with message msg.
func (w *nodeWorker) logged(msg string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, l := range w.logs {
		var rec map[string]any
		if json.Unmarshal([]byte(l), &rec) == nil && rec["message"] == msg {
			n++
		}
	}
	return n
}

// freePort is a loopback port for a helper process to listen on, which no
// outgoing connection can take before it binds it (core/loopback).
func freePort(t *testing.T) int {
	t.Helper()
	p, err := loopback.FreePort("")
	require.NoError(t, err)
	return p
}

func applyAll(t *testing.T, st *store.Store, kind string, specs map[string]string) {
	t.Helper()
	for name, spec := range specs {
		_, _, err := st.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: kind, Name: name, Spec: json.RawMessage(spec), Actor: "test"})
		require.NoError(t, err, name)
	}
}

// manifestDocs are the manifests the e2e worker prints.
func manifestDocs(t *testing.T) [][]byte {
	t.Helper()
	out, err := exec.Command("node", "dist/e2e/worker.js", "--print-manifests").Output()
	require.NoError(t, err)
	var manifests []json.RawMessage
	require.NoError(t, json.Unmarshal(out, &manifests))
	docs := make([][]byte, 0, len(manifests))
	for _, m := range manifests {
		docs = append(docs, m)
	}
	return docs
}

// applyManifests applies the manifests the e2e worker prints.
func applyManifests(t *testing.T, s *apptest.Stack) {
	t.Helper()
	for _, m := range manifestDocs(t) {
		s.ApplyManifest(string(m))
	}
}

func requireStatus(t *testing.T, r resource.Resource, want string) {
	t.Helper()
	require.JSONEq(t, want, string(r.Status), "%s/%s", r.Kind, r.Name)
}

// TestGuide_TSBlocksAreTheExample: the TypeScript the provider guide shows
// is exactly the example these tests run.
func TestGuide_TSBlocksAreTheExample(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/implementing-a-provider.md")
	require.NoError(t, err)
	for _, name := range []string{"examples/greeter/greeter.ts", "examples/greeter/main.ts"} {
		want, err := os.ReadFile(name)
		require.NoError(t, err)
		marker := "<!-- file: workerproto/ts/" + name + " -->\n```ts\n"
		_, block, ok := strings.Cut(string(doc), marker)
		require.True(t, ok, "the guide shows %s", name)
		block, _, ok = strings.Cut(block, "\n```\n")
		require.True(t, ok, "the guide's %s block ends", name)
		require.Equal(t, string(want), block+"\n", "the guide's %s is out of date", name)
	}
}

// TestTSSDK_UnitSuite runs the SDK's node:test suite (test/*.test.ts): the
// session semantics against a scripted Connect broker, options, merge rules.
func TestTSSDK_UnitSuite(t *testing.T) {
	t.Parallel()
	build(t)
	files, err := filepath.Glob("dist/test/*.test.js")
	require.NoError(t, err)
	require.NotEmpty(t, files, "the build emitted no test files")
	out, err := exec.Command("node", append([]string{"--test", "--test-reporter=spec"}, files...)...).CombinedOutput()
	t.Log(string(out))
	require.NoError(t, err, "node --test failed")
}

// TestTSWorker_ConvergesSurvivesABrokerRestartAndDrains runs the TypeScript
// worker against a control process and a broker process: the example kind
// converges and follows a live providerconfig edit; terminal, transient and
// deadline failures behave as in the Go SDK; the broker is stopped and
// started again on the same address (with work applied while it was down
// and a task in flight when it went) and everything converges through the
// worker's reconnect; SIGTERM drains a running task before the worker exits.
func TestTSWorker_ConvergesSurvivesABrokerRestartAndDrains(t *testing.T) {
	t.Parallel()
	build(t)
	ctx := context.Background()
	port := freePort(t)
	s := apptest.Start(t, apptest.Options{
		Roles: []config.Role{config.RoleControl},
		Config: func(c *config.Config) {
			if c.Role == config.RoleBroker {
				c.ListenAddr = fmt.Sprintf("127.0.0.1:%d", port)
			}
		},
	})
	applyManifests(t, s)
	_, stopBroker := s.StartProcess(config.RoleBroker)

	w := startWorker(t, fmt.Sprintf("BROKER_URL=http://127.0.0.1:%d", port), "WORKER_TOKEN="+apptest.WorkerToken,
		"WORKER_DRAIN_TIMEOUT=20s", "LOG_FORMAT=json", "LOG_LEVEL=debug")

	greetings := map[string]string{}
	for i := range 10 {
		greetings[fmt.Sprintf("g%d", i)] = fmt.Sprintf(`{"name":"g%d"}`, i)
	}
	applyAll(t, s.Store, "tsgreeting", greetings)
	for name := range greetings {
		r := s.WaitPhase("tsgreeting", name, resource.PhaseReady, 2*time.Minute)
		requireStatus(t, r, fmt.Sprintf(`{"message":"Hello, %s!"}`, name))
	}

	// A live providerconfig edit reaches the worker; the next reconcile uses it.
	_, _, err := s.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "tsgreeting", Name: "default", IsDefault: true,
		Spec: json.RawMessage(`{"salutation":"Howdy"}`)})
	require.NoError(t, err)
	apptest.WaitFor(t, time.Minute, "the worker is pushed the config", func() bool {
		return w.has(map[string]any{"event": "config", "spec": map[string]any{"salutation": "Howdy"}})
	})
	applyAll(t, s.Store, "tsgreeting", map[string]string{"g0": `{"name":"g0","shout":true}`})
	apptest.WaitFor(t, time.Minute, "g0 is greeted again", func() bool {
		r, err := s.Store.GetResource(ctx, "tsgreeting", "g0")
		return err == nil && r.Phase == resource.PhaseReady && strings.Contains(string(r.Status), "HOWDY, G0!")
	})

	// Terminal stops; transient retries; a handler outliving its deadline is aborted and retried.
	applyAll(t, s.Store, "tsprobe", map[string]string{
		"doomed":  `{"mode":"terminal"}`,
		"flaky":   `{"mode":"transient","fail_times":2}`,
		"overrun": `{"mode":"overrun"}`,
	})
	doomed := s.WaitPhase("tsprobe", "doomed", resource.PhaseFailed, 2*time.Minute)
	conds, err := s.Store.Conditions(ctx, doomed.ID)
	require.NoError(t, err)
	require.Contains(t, fmt.Sprint(conds), "probe doomed refuses terminally")
	requireStatus(t, s.WaitPhase("tsprobe", "flaky", resource.PhaseReady, 2*time.Minute), `{"attempts":3,"lease":true}`)
	requireStatus(t, s.WaitPhase("tsprobe", "overrun", resource.PhaseReady, 2*time.Minute), `{"attempts":2,"lease":true}`)
	aborted := w.find(map[string]any{"event": "aborted", "name": "overrun"})
	require.NotNil(t, aborted, "the overrunning handler's signal aborted")
	require.Regexp(t, `^task deadline of \d+ms exceeded$`, aborted["reason"])
	require.False(t, w.has(map[string]any{"event": "start", "name": "doomed", "attempt": 2}), "a terminal failure is not retried")

	// The broker goes away with a task in flight, work is applied while it
	// is down, and a successor comes up on the same address.
	applyAll(t, s.Store, "tsprobe", map[string]string{"inflight": `{"mode":"hold","hold_ms":1500}`})
	apptest.WaitFor(t, time.Minute, "the held task reached the worker", func() bool {
		return w.has(map[string]any{"event": "start", "name": "inflight"})
	})
	stopBroker()
	later := map[string]string{}
	for i := range 10 {
		later[fmt.Sprintf("late%d", i)] = fmt.Sprintf(`{"name":"late%d"}`, i)
	}
	applyAll(t, s.Store, "tsgreeting", later)
	applyAll(t, s.Store, "tsgreeting", map[string]string{"g1": `{"name":"g1","shout":true}`})
	s.StartProcess(config.RoleBroker)
	for name := range later {
		requireStatus(t, s.WaitPhase("tsgreeting", name, resource.PhaseReady, 2*time.Minute), fmt.Sprintf(`{"message":"Howdy, %s!"}`, name))
	}
	apptest.WaitFor(t, 2*time.Minute, "g1 reconciled after the restart", func() bool {
		r, err := s.Store.GetResource(ctx, "tsgreeting", "g1")
		return err == nil && r.Phase == resource.PhaseReady && strings.Contains(string(r.Status), "HOWDY, G1!")
	})
	s.WaitPhase("tsprobe", "inflight", resource.PhaseReady, 2*time.Minute)
	require.GreaterOrEqual(t, w.logged("connected to broker"), 2, "the worker reconnected")

	// SIGTERM drains: the running task finishes and its result lands before exit.
	applyAll(t, s.Store, "tsprobe", map[string]string{"draining": `{"mode":"hold","hold_ms":2000}`})
	apptest.WaitFor(t, time.Minute, "the drained task reached the worker", func() bool {
		return w.has(map[string]any{"event": "start", "name": "draining"})
	})
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-w.done:
		require.NoError(t, err, "the worker exits cleanly after draining")
		w.done <- nil // for the cleanup
	case <-time.After(time.Minute):
		t.Fatal("the worker did not exit within a minute of SIGTERM")
	}
	require.True(t, w.has(map[string]any{"event": "done", "name": "draining"}))
	require.True(t, w.has(map[string]any{"event": "exit"}))
	requireStatus(t, s.WaitPhase("tsprobe", "draining", resource.PhaseReady, time.Minute), `{"attempts":1,"lease":true}`)
	require.Equal(t, 1, w.logged("draining in-flight tasks"))
}

// last returns the last event matching every field in want, or nil.
func (w *nodeWorker) last(want map[string]any) map[string]any {
	w.mu.Lock()
	defer w.mu.Unlock()
	for i := len(w.evs) - 1; i >= 0; i-- {
		ev, ok := w.evs[i], true
		for k, v := range want {
			if fmt.Sprint(ev[k]) != fmt.Sprint(v) {
				ok = false
				break
			}
		}
		if ok {
			return ev
		}
	}
	return nil
}

// TestTSWorker_RollupReceivesItsSubtree: a composite served by the
// TypeScript worker (tsfleet: probes and a nested fleet) rolls up with
// every descendant as the store holds it: ids, kinds, names, phases
// (Ready, Failed), health, owners (the root, and the nested fleet for its
// own probes) and, when its rollup reads childStatus, their status. The
// broker sends the subtree as columns or as a list; the handler sees the
// same either way. Its rollup reads no part of its own resource, which
// arrives as identity alone.
func TestTSWorker_RollupReceivesItsSubtree(t *testing.T) {
	t.Parallel()
	build(t)
	ctx := context.Background()
	s := apptest.Start(t, apptest.Options{})
	applyManifests(t, s)
	w := startWorker(t, "BROKER_URL="+s.BrokerURL(), "WORKER_TOKEN="+apptest.WorkerToken, "LOG_FORMAT=json")

	const spec = `{"modes":["ok","terminal"],"sub":{"modes":["ok","unhealthy"]}}`
	applyAll(t, s.Store, "tsfleet", map[string]string{"fleet": spec})
	applyAll(t, s.Store, "tsfleetbare", map[string]string{"bare": spec})
	for _, tc := range []struct {
		reason, kind, name string
		withStatus         bool
	}{
		{"the rollup reads childStatus: each child's status arrives", "tsfleet", "fleet", true},
		{"the rollup reads nothing: no child's status arrives", "tsfleetbare", "bare", false},
	} {
		root := s.WaitPhase(tc.kind, tc.name, resource.PhaseReady, 2*time.Minute)
		s.WaitPhase("tsprobe", tc.name+"-p1", resource.PhaseFailed, time.Minute)
		s.WaitPhase(tc.kind, tc.name+"-sub", resource.PhaseReady, time.Minute)

		// The descendants as the store holds them, as the handler reports them.
		want := func() []any {
			rs, err := s.Store.SubtreeResources(ctx, root.ID)
			require.NoError(t, err)
			out := []any{}
			for _, r := range rs {
				if r.ID == root.ID {
					continue
				}
				var status any
				if tc.withStatus {
					// the subtree read leaves the documents out: the row's own read has its status
					full, err := s.Store.GetResourceByID(ctx, r.ID)
					require.NoError(t, err)
					if len(full.Status) > 0 {
						require.NoError(t, json.Unmarshal(full.Status, &status))
					}
				}
				out = append(out, map[string]any{"id": r.ID.String(), "kind": r.Kind, "name": r.Name, "phase": string(r.Phase),
					"healthOk": r.HealthOK, "ownerId": r.OwnerID.String(), "status": status})
			}
			return out
		}
		byID := func(l []any) []any {
			slices.SortFunc(l, func(a, b any) int {
				return strings.Compare(a.(map[string]any)["id"].(string), b.(map[string]any)["id"].(string))
			})
			return l
		}
		var diff string
		apptest.WaitFor(t, time.Minute, tc.name+"'s rollup saw its settled subtree", func() bool {
			ev := w.last(map[string]any{"event": "rollup", "kind": tc.kind, "name": tc.name})
			if ev == nil {
				diff = "no rollup yet"
				return false
			}
			got, _ := ev["children"].([]any)
			diff = cmp.Diff(byID(want()), byID(got))
			return diff == ""
		})
		require.Empty(t, diff, tc.reason)

		got := w.last(map[string]any{"event": "rollup", "kind": tc.kind, "name": tc.name})
		kids := got["children"].([]any)
		require.Len(t, kids, 5, "two probes, the nested fleet and its two probes")
		phases, owners, unhealthy := map[string]bool{}, map[string]bool{}, 0
		for _, k := range kids {
			c := k.(map[string]any)
			phases[c["phase"].(string)] = true
			owners[c["ownerId"].(string)] = true
			if c["healthOk"] == false {
				unhealthy++
			}
		}
		require.True(t, phases["Ready"] && phases["Failed"], "phases seen: %v", phases)
		require.Len(t, owners, 2, "the root and the nested fleet own children")
		require.True(t, owners[root.ID.String()])
		require.Positive(t, unhealthy, "the unhealthy probe arrives unhealthy")
		require.Equal(t, map[string]any{"spec": nil, "status": nil, "labels": map[string]any{}, "finalizers": []any{}}, got["resource"],
			"the rollup reads no part of its own resource")
	}
}
