package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// scriptKind is served by the stdworker: its program comes from the config.
const scriptKind = `{"kind":"script","spec_schema":{"type":"object"},
 "config_schema":{"type":"object","properties":{"command":{"type":"array","items":{"type":"string"}},
   "timeout_secs":{"type":"number"},"env":{"type":"object"}}},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status","conditions"]}]}`

// script is the kind's program: POSIX sh builtins only. It logs each run,
// then behaves by resource name. "flaky" and "slow" misbehave on their first
// run only (a marker file remembers it); "slow" spins until it is killed.
const script = `#!/bin/sh
read -r _ || :
echo "$CONVERGE_NAME" >> "$STATE/runs"
case "$CONVERGE_NAME" in
ok)
  printf '{"status":{"greeting":"hello %s","stage":"%s"}}\n' "$CONVERGE_NAME" "$CONVERGE_STAGE" ;;
doomed)
  echo "cidr 10.0.0.0/8 overlaps" >&2; exit 2 ;;
flaky)
  if [ ! -e "$STATE/flaky" ]; then : > "$STATE/flaky"; echo "api throttled" >&2; exit 1; fi
  echo '{"status":{"attempt":2}}' ;;
slow)
  if [ ! -e "$STATE/slow" ]; then : > "$STATE/slow"; while :; do :; done; fi
  echo '{"status":{"attempt":2}}' ;;
esac
`

// TestStdworker_ScriptKindEndToEnd runs the built stdworker binary against a
// real converge: success, terminal failure, transient failure then success,
// and a timeout then success.
func TestStdworker_ScriptKindEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "stdworker")
	build := exec.Command("go", "build", "-o", bin, ".")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build stdworker: %s", out)
	prog := filepath.Join(dir, "kind.sh")
	require.NoError(t, os.WriteFile(prog, []byte(script), 0o755))
	state := filepath.Join(dir, "state")
	require.NoError(t, os.Mkdir(state, 0o755))

	p := apptest.Start(t, apptest.Options{}).Process
	ctx := context.Background()
	_, _, err = p.Store.ApplyManifest(ctx, []byte(scriptKind))
	require.NoError(t, err)
	cfg, _ := json.Marshal(map[string]any{"command": []string{prog}, "env": map[string]string{"STATE": state}})
	_, _, err = p.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "script", Name: "default", IsDefault: true, Spec: cfg})
	require.NoError(t, err)
	// The slow resource attaches an override: its spec merges over the default's.
	_, _, err = p.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "script", Name: "impatient",
		Spec: json.RawMessage(`{"timeout_secs":0.5}`)})
	require.NoError(t, err)

	startStdworker(t, bin, apptest.BrokerURL(p))
	for _, name := range []string{"ok", "doomed", "flaky", "slow"} {
		in := store.ApplyResourceInput{Kind: "script", Name: name, Spec: json.RawMessage(`{}`)}
		if name == "slow" {
			in.ProviderConfigRef = "impatient"
		}
		_, _, err := p.Store.ApplyResource(ctx, in)
		require.NoError(t, err)
	}

	// Watch all four at once: a transient failure is visible only until the
	// reaper retries it.
	seen := watch(t, p.Store, map[string]resource.Phase{"ok": resource.PhaseReady, "doomed": resource.PhaseFailed,
		"flaky": resource.PhaseReady, "slow": resource.PhaseReady})

	require.JSONEq(t, `{"greeting":"hello ok","stage":"work"}`, string(seen["ok"].final.Status), "the program's stdout became the status")

	doomed := seen["doomed"].failed
	require.NotNil(t, doomed)
	require.True(t, doomed.FailureTerminal, "exit 2 is a terminal failure")
	require.Contains(t, syncedMessage(t, p.Store, *doomed), "cidr 10.0.0.0/8 overlaps", "stderr explains the failure")

	flaky := seen["flaky"]
	require.NotNil(t, flaky.failed, "the first run failed")
	require.False(t, flaky.failed.FailureTerminal, "exit 1 is transient")
	require.Contains(t, flaky.message, "api throttled")
	require.JSONEq(t, `{"attempt":2}`, string(flaky.final.Status), "a transient failure is retried")

	slow := seen["slow"]
	require.NotNil(t, slow.failed, "the first run timed out")
	require.False(t, slow.failed.FailureTerminal, "a timeout is transient")
	require.Contains(t, slow.message, "timed out")
	require.JSONEq(t, `{"attempt":2}`, string(slow.final.Status))

	// The terminal failure was not retried while the others were.
	runs, err := os.ReadFile(filepath.Join(state, "runs"))
	require.NoError(t, err)
	count := map[string]int{}
	for _, n := range strings.Fields(string(runs)) {
		count[n]++
	}
	require.Equal(t, map[string]int{"ok": 1, "doomed": 1, "flaky": 2, "slow": 2}, count)
}

func syncedMessage(t *testing.T, st *store.Store, r resource.Resource) string {
	t.Helper()
	conds, err := st.Conditions(context.Background(), r.ID)
	require.NoError(t, err)
	i := slices.IndexFunc(conds, func(c resource.Condition) bool { return c.Type == "Synced" })
	require.GreaterOrEqual(t, i, 0, "a Synced condition explains the failure: %+v", conds)
	return conds[i].Message
}

// startStdworker runs the binary until the test ends, then stops it with
// SIGTERM and expects a clean exit.
func startStdworker(t *testing.T, bin, broker string, kinds ...string) {
	t.Helper()
	var logs bytes.Buffer
	if len(kinds) == 0 {
		kinds = []string{"script"}
	}
	args := []string{"--broker", broker, "--drain-timeout", "5s"}
	for _, k := range kinds {
		args = append(args, "--kind", k)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "LOG_LEVEL=warn", "LOG_FORMAT=json", "WORKER_TOKEN="+apptest.WorkerToken)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			require.NoError(t, err, "stdworker exits cleanly on SIGTERM; logs:\n%s", logs.String())
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("stdworker did not stop on SIGTERM; logs:\n%s", logs.String())
		}
	})
}

// history is what watch saw of one resource.
type history struct {
	failed  *resource.Resource // the first Failed snapshot
	message string             // its Synced condition message
	final   resource.Resource
}

// watch polls script resources until each reaches its final phase (within
// 60s), recording the first Failed snapshot of each on the way.
func watch(t *testing.T, st *store.Store, final map[string]resource.Phase) map[string]*history {
	t.Helper()
	ctx := context.Background()
	seen := map[string]*history{}
	pending := maps.Clone(final)
	deadline := time.Now().Add(90 * time.Second)
	for len(pending) > 0 && time.Now().Before(deadline) {
		for name, want := range pending {
			r, err := st.GetResource(ctx, "script", name)
			if err != nil {
				continue
			}
			h := seen[name]
			if h == nil {
				h = &history{}
				seen[name] = h
			}
			if r.Phase == resource.PhaseFailed && h.failed == nil {
				h.failed = &r
				h.message = syncedMessage(t, st, r)
			}
			h.final = r
			if r.Phase == want {
				delete(pending, name)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	for name, want := range pending {
		last := seen[name]
		if last == nil {
			last = &history{}
		}
		t.Fatalf("script/%s did not reach %s; last phase %q status %s", name, want, last.final.Phase, last.final.Status)
	}
	return seen
}
