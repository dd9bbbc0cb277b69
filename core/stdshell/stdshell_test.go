package stdshell_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/stdshell"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const shellKind = `{"kind":"shjob","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status","conditions"]}]}`

// mainSh behaves by resource name; lib.sh shows the bundle is a directory.
const mainSh = `. ./lib.sh
task=$(cat)
case "$CONVERGE_NAME" in
ok) greet "$CONVERGE_NAME" ;;
env) printf '{"status":{"names":"%s","home_is_cwd":%s}}\n' "$(env | cut -d= -f1 | sort | tr '\n' ' ')" \
       "$([ "$HOME" = "$(pwd)" ] && echo true || echo false)" ;;
doomed) echo "region mars-1 does not exist" >&2; exit 2 ;;
flaky)
  if [ ! -e "$STATE/flaky" ]; then : > "$STATE/flaky"; echo "api throttled" >&2; exit 1; fi
  echo '{"status":{"attempt":2}}' ;;
slow)
  if [ ! -e "$STATE/slow" ]; then : > "$STATE/slow"; while :; do :; done; fi
  echo '{"status":{"attempt":2}}' ;;
huge) i=0; while [ $i -lt 4096 ]; do echo "0123456789abcdef0123456789abcdef"; i=$((i+1)); done ;;
esac
`

const libSh = `greet() { printf '{"status":{"greeting":"hello %s"}}\n' "$1"; }
`

// TestStdshell_ConvergesAgainstAServer runs bundle scripts under a real
// converge: a status from stdout, a clean environment with only the
// configured variables, exit 2 terminal, exit 1 transient and retried, a
// timeout transient and retried, and too much output terminal.
func TestStdshell_ConvergesAgainstAServer(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	s := apptest.Start(t, apptest.Options{})
	s.ApplyManifest(shellKind)
	ctx := context.Background()
	spec, _ := json.Marshal(map[string]any{"env": map[string]string{"STATE": state}, "pass_env": []string{"DEPLOY_TOKEN", "UNSET_ONE"},
		"max_output_bytes": 65536, "timeout_secs": 30})
	data, _ := json.Marshal(map[string]string{"main.sh": mainSh, "lib.sh": libSh})
	_, _, err := s.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "shjob", Name: "default", IsDefault: true, Spec: spec, Data: data})
	require.NoError(t, err)
	_, _, err = s.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "shjob", Name: "impatient", Spec: json.RawMessage(`{"timeout_secs":0.5}`)})
	require.NoError(t, err)
	workerEnv := map[string]string{"DEPLOY_TOKEN": "t0k", "AWS_SECRET_ACCESS_KEY": "must-not-leak"}
	p := stdshell.New(manifest.KindVersion{Kind: "shjob"}, s.Log, func(k string) string { return workerEnv[k] })
	s.StartWorker(apptest.Worker{Providers: []worker.Provider{p}})
	for _, name := range []string{"ok", "env", "doomed", "flaky", "slow", "huge"} {
		in := store.ApplyResourceInput{Kind: "shjob", Name: name, Spec: json.RawMessage(`{}`)}
		if name == "slow" {
			in.ProviderConfigRef = "impatient"
		}
		_, _, err := s.Store.ApplyResource(ctx, in)
		require.NoError(t, err)
	}

	ok := s.WaitPhase("shjob", "ok", resource.PhaseReady, 60*time.Second)
	require.JSONEq(t, `{"greeting":"hello ok"}`, string(ok.Status), "stdout's status became the resource's")

	env := s.WaitPhase("shjob", "env", resource.PhaseReady, 60*time.Second)
	var got struct {
		Names     string `json:"names"`
		HomeIsCwd bool   `json:"home_is_cwd"`
	}
	require.NoError(t, json.Unmarshal(env.Status, &got))
	names := strings.Fields(got.Names)
	require.Subset(t, names, []string{"PATH", "HOME", "TMPDIR", "STATE", "DEPLOY_TOKEN", "CONVERGE_STAGE", "CONVERGE_NAME"})
	require.NotContains(t, names, "AWS_SECRET_ACCESS_KEY", "the worker's environment does not leak")
	require.NotContains(t, names, "UNSET_ONE")
	require.True(t, got.HomeIsCwd, "HOME is the task's own directory")

	doomed := s.WaitPhase("shjob", "doomed", resource.PhaseFailed, 60*time.Second)
	require.True(t, doomed.FailureTerminal, "exit 2 is terminal")
	requireSynced(t, s.Store, doomed, "region mars-1 does not exist")

	huge := s.WaitPhase("shjob", "huge", resource.PhaseFailed, 60*time.Second)
	require.True(t, huge.FailureTerminal, "too much output is terminal")
	requireSynced(t, s.Store, huge, "stdout exceeded 65536 bytes")

	flaky := s.WaitPhase("shjob", "flaky", resource.PhaseReady, 90*time.Second)
	require.JSONEq(t, `{"attempt":2}`, string(flaky.Status), "a transient failure is retried")
	slow := s.WaitPhase("shjob", "slow", resource.PhaseReady, 90*time.Second)
	require.JSONEq(t, `{"attempt":2}`, string(slow.Status), "a timeout is transient and retried")
	for _, marker := range []string{"flaky", "slow"} {
		_, err := os.Stat(filepath.Join(state, marker))
		require.NoError(t, err, "%s failed once first", marker)
	}
}

func requireSynced(t *testing.T, st *store.Store, r resource.Resource, want string) {
	t.Helper()
	conds, err := st.Conditions(context.Background(), r.ID)
	require.NoError(t, err)
	for _, c := range conds {
		if c.Type == "Synced" {
			require.Contains(t, c.Message, want)
			return
		}
	}
	t.Fatalf("no Synced condition on %s: %+v", r.Name, conds)
}

func TestParse_RefusesBadConfigAndBundles(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string]string{
		`{"timeout_secs":-1}`:            "timeout_secs -1 is outside",
		`{"max_output_bytes":999999999}`: "max_output_bytes 999999999 is outside",
		`{"interpreter":[""]}`:           "interpreter[0] is empty",
		`{"comand":["x"]}`:               `unknown field "comand"`,
		`{"env":{"A=B":"c"}}`:            "is not a variable name",
		`{"pass_env":["TOKEN=x"]}`:       `pass_env[0] "TOKEN=x" is not a variable name`,
		`{"pass_env":[""]}`:              `pass_env[0] "" is not a variable name`,
	} {
		_, err := stdshell.ParseConfig(json.RawMessage(spec))
		require.ErrorContains(t, err, want, spec)
	}
	for data, want := range map[string]string{
		`{"../evil.sh":"x"}`:                       "clean relative path",
		`{"/etc/passwd":"x"}`:                      "clean relative path",
		`{"a/./b":"x"}`:                            "clean relative path",
		`["main.sh"]`:                              "want an object",
		`{"main.sh":"x",".":"x"}`:                  `file name "." must be a clean relative path`,
		`{"main.sh":"x","a\u0000b":"x"}`:           "clean relative path",
		`{"main.sh":"x","lib":"x","lib/a.sh":"y"}`: `file name "lib/a.sh" is inside "lib", which is a file of the bundle too`,
		`{"main.sh":"x","a":"x","a/b/c/d":"y"}`:    `file name "a/b/c/d" is inside "a"`,
		`{"` + strings.Repeat("n", 256) + `":"x"}`: "has a part of 256 bytes, at most 255",
	} {
		_, err := stdshell.ParseBundle(json.RawMessage(data))
		require.ErrorContains(t, err, want, data)
	}
	_, err := stdshell.ParseBundle(json.RawMessage(`{"main.sh":"` + strings.Repeat("x", stdshell.MaxBundleBytes) + `"}`))
	require.ErrorContains(t, err, "at most 1048576")
	// More than one bad name or variable: the first in name order, always
	// (a Go map's order named any of them, a different one each time).
	for range 30 {
		_, err := stdshell.ParseBundle(json.RawMessage(`{"main.sh":"x","/a":"x","/b":"x","/c":"x"}`))
		require.ErrorContains(t, err, `file name "/a"`)
		_, err = stdshell.ParseConfig(json.RawMessage(`{"env":{"A=1":"x","B=1":"x","C=1":"x"}}`))
		require.ErrorContains(t, err, `env name "A=1"`)
	}
}

// TestWork_UnwritableBundleIsTerminal: a bundle whose names cannot all be
// written makes the kind unready and fails a task terminally, naming the
// file, instead of failing every task transiently.
func TestWork_UnwritableBundleIsTerminal(t *testing.T) {
	t.Parallel()
	data := json.RawMessage(`{"main.sh":"echo '{}'","lib":"x","lib/a.sh":"y"}`)
	p := stdshell.New(manifest.KindVersion{Kind: "shjob"}, apptest.Logger(t), nil)
	p.OnConfig(worker.ProviderConfig{Kind: "shjob", Name: "default", IsDefault: true, Data: data})
	require.False(t, p.Ready())
	_, err := p.Work(context.Background(), worker.Request{Stage: worker.StageWork, Reaction: "work",
		Resource: worker.Resource{Kind: "shjob", Version: "v1", Name: "a"}, Config: worker.EffectiveConfig{Name: "default", Data: data}})
	require.ErrorContains(t, err, `"lib/a.sh" is inside "lib"`)
	require.True(t, worker.IsTerminal(err))
}

func TestOnConfig_UnreadyWithoutTheEntryScript(t *testing.T) {
	t.Parallel()
	p := stdshell.New(manifest.KindVersion{Kind: "k"}, apptest.Logger(t), nil)
	p.OnConfig(worker.ProviderConfig{Name: "default", Data: json.RawMessage(`{"other.sh":"true"}`)})
	require.False(t, p.Ready())
	p.OnConfig(worker.ProviderConfig{Name: "default", Data: json.RawMessage(`{"main.sh":"true"}`)})
	require.True(t, p.Ready())
	p.OnConfig(worker.ProviderConfig{Name: "default", Spec: json.RawMessage(`{"interpreter":["/no/such/shell"]}`), Data: json.RawMessage(`{"main.sh":"true"}`)})
	require.False(t, p.Ready())
}
