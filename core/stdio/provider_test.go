package stdio_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/stdio"
	"github.com/converge-run/converge/core/worker"
)

// script writes a POSIX sh script into dir and returns its path. Scripts use
// shell builtins only (no cat, sleep or touch): /bin/sh is all they need.
// sh is the command that runs a script written by script. Through the
// interpreter, not by exec'ing the script itself: a script still open for
// writing in a parallel test is inherited by any child forked meanwhile,
// and exec'ing it would fail with "text file busy" (ETXTBSY) until that
// child execs.
func sh(path string) []string { return []string{"/bin/sh", path} }

func script(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
	return p
}

func config(t *testing.T, v map[string]any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func request(name string, cfg json.RawMessage) worker.Request {
	return worker.Request{
		Stage:    worker.StageWork,
		Reaction: "work",
		Trigger:  "specChange",
		Resource: worker.Resource{ID: "id-" + name, Kind: "script", Version: "v1", Name: name,
			Labels: map[string]string{"team": "a"}, Spec: json.RawMessage(`{"size":3}`), Generation: 4},
		Config: worker.EffectiveConfig{Name: "default", Spec: cfg},
	}
}

func TestWork_MapsExitCodesAndErrorDocuments(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	type want struct {
		status   string // JSON; "" = no status
		errHas   string // "" = success
		terminal bool
	}
	cases := map[string]struct {
		reason string
		body   string
		want   want
	}{
		"success": {
			reason: "exit 0 with an outcome document is a success",
			body:   `read -r _ || :; echo '{"status":{"ok":true},"conditions":[{"type":"Ready","status":"True"}]}'`,
			want:   want{status: `{"ok":true}`},
		},
		"empty": {
			reason: "exit 0 with no output is an empty outcome",
			body:   `exit 0`,
			want:   want{},
		},
		"terminal-exit": {
			reason: "exit 2 is a terminal failure carrying the stderr tail",
			body:   `echo "cidr overlaps" >&2; exit 2`,
			want:   want{errHas: "exited 2 (terminal): cidr overlaps", terminal: true},
		},
		"transient-exit": {
			reason: "any other non-zero exit is transient",
			body:   `echo "api throttled" >&2; exit 1`,
			want:   want{errHas: "exited 1: api throttled"},
		},
		"error-document-terminal": {
			reason: "an error document wins over exit 0",
			body:   `echo '{"error":{"message":"quota exceeded","terminal":true}}'`,
			want:   want{errHas: "quota exceeded", terminal: true},
		},
		"error-document-transient": {
			reason: "an error document wins over the exit code",
			body:   `echo '{"error":{"message":"try later"}}'; exit 2`,
			want:   want{errHas: "try later"},
		},
		"invalid-json": {
			reason: "exit 0 with output that is not an outcome is terminal",
			body:   `echo 'not json'`,
			want:   want{errHas: "decode outcome", terminal: true},
		},
		"misspelt-field": {
			reason: "a misspelt field is reported rather than silently dropped",
			body:   `echo '{"stauts":{}}'`,
			want:   want{errHas: `unknown field "stauts"`, terminal: true},
		},
		"two-documents": {
			reason: "stdout holds exactly one document",
			body:   `echo '{}'; echo '{}'`,
			want:   want{errHas: "more than one JSON value", terminal: true},
		},
		"too-much-output": {
			reason: "stdout past max_output_bytes is terminal, and the program is stopped",
			body:   `while :; do echo 0123456789abcdef; done`,
			want:   want{errHas: "stdout exceeded 1024 bytes", terminal: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := stdio.New(manifest.KindVersion{Kind: "script"}, zerolog.Nop())
			cfg := config(t, map[string]any{"command": sh(script(t, dir, name+".sh", tc.body)), "max_output_bytes": 1024})
			out, err := p.Work(context.Background(), request(name, cfg))
			if tc.want.errHas == "" {
				require.NoError(t, err, tc.reason)
				if tc.want.status == "" {
					require.Nil(t, out.Status, tc.reason)
				} else {
					require.JSONEq(t, tc.want.status, string(out.Status), tc.reason)
				}
				return
			}
			require.Error(t, err, tc.reason)
			require.Contains(t, err.Error(), tc.want.errHas, tc.reason)
			require.Equal(t, tc.want.terminal, worker.IsTerminal(err), tc.reason)
		})
	}
}

func TestWork_TheProgramReadsTheTaskAndItsVariables(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The status is the task document itself, plus two task variables.
	echo := script(t, dir, "echo.sh",
		`IFS= read -r task || :; printf '{"status":{"task":%s,"stage":"%s","name":"%s","extra":"%s"}}' "$task" "$CONVERGE_STAGE" "$CONVERGE_NAME" "$EXTRA"`)
	p := stdio.New(manifest.KindVersion{Kind: "script"}, zerolog.Nop())
	cfg := config(t, map[string]any{"command": sh(echo), "env": map[string]string{"EXTRA": "x1"}, "region": "eu-west-1"})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := p.Work(ctx, request("web", cfg))
	require.NoError(t, err)
	var got struct {
		Task  stdio.Task `json:"task"`
		Stage string     `json:"stage"`
		Name  string     `json:"name"`
		Extra string     `json:"extra"`
	}
	require.NoError(t, json.Unmarshal(out.Status, &got), string(out.Status))
	require.Equal(t, "work", got.Stage)
	require.Equal(t, "web", got.Name)
	require.Equal(t, "x1", got.Extra, "the config's env reaches the program")
	require.Greater(t, got.Task.DeadlineMS, int64(0), "the remaining deadline is passed on")
	require.LessOrEqual(t, got.Task.DeadlineMS, int64(20000))
	got.Task.DeadlineMS = 0
	want := stdio.Task{
		Protocol: stdio.ProtocolVersion, Stage: "work", Reaction: "work", Trigger: "specChange",
		Resource: stdio.TaskResource{ID: "id-web", Kind: "script", Version: "v1", Name: "web", Labels: map[string]string{"team": "a"},
			Spec: json.RawMessage(`{"size":3}`), Status: json.RawMessage(`null`), Generation: 4, Finalizers: []string{}},
		Config: stdio.TaskConfig{Name: "default", Spec: cfg, Data: json.RawMessage(`null`)},
	}
	if diff := cmp.Diff(want, got.Task, cmp.Comparer(jsonEqual)); diff != "" {
		t.Errorf("task document (-want +got):\n%s", diff)
	}
}

func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return string(a) == string(b)
	}
	return cmp.Equal(x, y)
}

func TestWork_ComposerOutcomeConvertsToChildrenAndEdges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	compose := script(t, dir, "compose.sh", `echo '{"status":{"phase":"composed"},
 "children":[{"kind":"vpc","name":"a-vpc","spec":{"cidr":"10.0.0.0/16"}},
             {"kind":"route","name":"a-rt","labels":{"team":"a"},"spec":{},"provider_config_ref":"fast"}],
 "edges":[{"dependent":{"kind":"route","name":"a-rt"},"dependency":{"kind":"vpc","name":"a-vpc"},
           "value_flows":[{"src_field":"/vpc_id","dep_field":"/vpc_id"}]}],
 "health_ok":false}'`)
	p := stdio.New(manifest.KindVersion{Kind: "script"}, zerolog.Nop())
	req := request("a", config(t, map[string]any{"command": sh(compose)}))
	req.Stage = worker.StageCompose
	out, err := p.Work(context.Background(), req)
	require.NoError(t, err)
	f := false
	want := worker.Outcome{
		Status:   json.RawMessage(`{"phase":"composed"}`),
		HealthOK: &f,
		Children: []worker.Child{
			{Kind: "vpc", Name: "a-vpc", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)},
			{Kind: "route", Name: "a-rt", Labels: map[string]string{"team": "a"}, Spec: json.RawMessage(`{}`), ProviderConfigRef: "fast"},
		},
		Edges: []worker.Edge{{Dependent: worker.Ref{Kind: "route", Name: "a-rt"}, Dependency: worker.Ref{Kind: "vpc", Name: "a-vpc"},
			ValueFlows: []worker.ValueFlow{{SrcField: "/vpc_id", DepField: "/vpc_id"}}}},
	}
	if diff := cmp.Diff(want, out, cmp.Comparer(jsonEqual)); diff != "" {
		t.Errorf("outcome (-want +got):\n%s", diff)
	}
}

func TestWork_TimeoutKillsTheWholeProcessGroup(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		body   string
	}{
		"sleeps": {
			reason: "a program past timeout_secs is stopped with SIGTERM",
			body:   `(while :; do :; done) & echo $! > "$PIDFILE"; wait`,
		},
		"ignores-sigterm": {
			reason: "a program that ignores SIGTERM is killed after the grace",
			body:   `trap '' TERM; (while :; do :; done) & echo $! > "$PIDFILE"; while :; do wait; done`,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "child.pid")
			p := stdio.New(manifest.KindVersion{Kind: "script"}, zerolog.Nop())
			command := sh(script(t, dir, "slow.sh", tc.body))
			// The program must have started its child (and written its pid)
			// before timeout_secs stops it, or the run proves nothing: on a
			// loaded machine the shell may not get that far in 0.3 s. Such a
			// run is tried again with twice the time, up to a deadline.
			var pid int
			for timeout := 0.3; pid == 0; timeout *= 2 {
				require.LessOrEqual(t, timeout, 10.0, "the program never started its child within timeout_secs: %s", tc.reason)
				cfg := config(t, map[string]any{"command": command,
					"timeout_secs": timeout, "kill_grace_secs": 0.3, "env": map[string]string{"PIDFILE": pidFile}})
				started := time.Now()
				_, err := p.Work(context.Background(), request(name, cfg))
				require.Error(t, err, tc.reason)
				require.Contains(t, err.Error(), "timed out", tc.reason)
				require.False(t, worker.IsTerminal(err), "a timeout is transient: %s", tc.reason)
				require.Less(t, time.Since(started), time.Duration(timeout*float64(time.Second))+10*time.Second, tc.reason)
				b, err := os.ReadFile(pidFile)
				if errors.Is(err, fs.ErrNotExist) || (err == nil && strings.TrimSpace(string(b)) == "") {
					t.Logf("timeout_secs %v: stopped before it wrote its child's pid; again with twice the time", timeout)
					continue
				}
				require.NoError(t, err)
				pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
				require.NoError(t, err)
			}
			// The signal is asynchronous: the child is gone moments later.
			require.Eventually(t, func() bool { return !alive(pid) }, 5*time.Second, 10*time.Millisecond,
				"the program's background child was killed with it: %s", tc.reason)
		})
	}
}

func TestWork_HonoursTheTaskDeadline(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := stdio.New(manifest.KindVersion{Kind: "script"}, zerolog.Nop())
	cfg := config(t, map[string]any{"command": sh(script(t, dir, "slow.sh", `while :; do :; done`))})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	started := time.Now()
	_, err := p.Work(ctx, request("slow", cfg))
	require.ErrorContains(t, err, "timed out")
	require.False(t, worker.IsTerminal(err))
	require.Less(t, time.Since(started), 5*time.Second)
}

func TestWork_ConfigProblemsAreTerminal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := map[string]struct {
		reason string
		cfg    json.RawMessage
		errHas string
	}{
		"no-config":   {reason: "a kind without a providerconfig cannot run", cfg: nil, errHas: "no providerconfig"},
		"no-command":  {reason: "the command is required", cfg: json.RawMessage(`{"timeout_secs":3}`), errHas: "command is empty"},
		"missing":     {reason: "a program that does not exist cannot start", cfg: json.RawMessage(`{"command":["` + filepath.Join(dir, "nope") + `"]}`), errHas: "start"},
		"wrong-shape": {reason: "command is an argv array, not a shell line", cfg: json.RawMessage(`{"command":"echo hi"}`), errHas: "providerconfig spec"},
		"grace-cap": {reason: "kill_grace_secs is capped as stdshell's", cfg: json.RawMessage(`{"command":["x"],"kill_grace_secs":61}`),
			errHas: "kill_grace_secs 61 is outside 0..60"},
		"output-cap": {reason: "max_output_bytes is capped as stdshell's", cfg: json.RawMessage(`{"command":["x"],"max_output_bytes":67108865}`),
			errHas: "max_output_bytes 67108865 is outside 0..67108864"},
		"timeout-cap": {reason: "timeout_secs is capped as stdshell's", cfg: json.RawMessage(`{"command":["x"],"timeout_secs":86401}`),
			errHas: "timeout_secs 86401 is outside 0..86400"},
		"env-name": {reason: "an env name must be a variable name", cfg: json.RawMessage(`{"command":["x"],"env":{"A=B":"c"}}`),
			errHas: `env name "A=B" is not a variable name`},
		"pass-env-name": {reason: "a pass_env name must be a variable name", cfg: json.RawMessage(`{"command":["x"],"pass_env":[""]}`),
			errHas: `pass_env[0] "" is not a variable name`},
		"pass-env-credential": {reason: "the worker's own token is never passed, as the README promises",
			cfg:    json.RawMessage(`{"command":["x"],"pass_env":["HOME","WORKER_TOKEN"]}`),
			errHas: "pass_env[1] WORKER_TOKEN: the worker's own credential is never passed to a program"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := stdio.New(manifest.KindVersion{Kind: "script"}, zerolog.Nop())
			_, err := p.Work(context.Background(), request(name, tc.cfg))
			require.ErrorContains(t, err, tc.errHas, tc.reason)
			require.True(t, worker.IsTerminal(err), tc.reason)
		})
	}
}

func TestWork_ReactionCommandOverridesTheDefault(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := stdio.New(manifest.KindVersion{Kind: "script"}, zerolog.Nop())
	cfg := config(t, map[string]any{
		"command":  sh(script(t, dir, "work.sh", `echo '{"status":{"by":"work"}}'`)),
		"commands": map[string][]string{"rollup": sh(script(t, dir, "rollup.sh", `echo '{"status":{"by":"rollup"}}'`))},
	})
	for _, reaction := range []string{"work", "rollup"} {
		req := request("r", cfg)
		req.Reaction = reaction
		out, err := p.Work(context.Background(), req)
		require.NoError(t, err)
		require.JSONEq(t, fmt.Sprintf(`{"by":%q}`, reaction), string(out.Status))
	}
}

func TestOnConfig_ReadyOnlyWithARunnableCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := script(t, dir, "ok.sh", `exit 0`)
	p := stdio.New(manifest.KindVersion{Kind: "script"}, zerolog.Nop())
	require.False(t, p.Ready(), "no default config yet")
	steps := []struct {
		reason string
		spec   string
		ready  bool
	}{
		{reason: "a runnable command makes the kind ready", spec: `{"command":["` + ok + `"]}`, ready: true},
		{reason: "a missing program makes it unready", spec: `{"command":["` + filepath.Join(dir, "gone") + `"]}`, ready: false},
		{reason: "a PATH name is looked up", spec: `{"command":["sh","-c","exit 0"]}`, ready: true},
		{reason: "a deleted default leaves it unready", spec: ``, ready: false},
	}
	for _, s := range steps {
		p.OnConfig(worker.ProviderConfig{Kind: "script", Name: "default", IsDefault: true, Spec: json.RawMessage(s.spec)})
		require.Equal(t, s.ready, p.Ready(), s.reason)
	}
}

func alive(pid int) bool {
	// A zombie still answers kill(0); read its state instead.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	if len(f) > 2 && f[2] == "Z" {
		return false
	}
	return !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

// TestWork_TheEnvironmentIsClean: the program gets PATH, HOME, TMPDIR and
// LANG, pass_env's variables, env and the CONVERGE_* variables, nothing
// else of the worker's (never its WORKER_TOKEN).
func TestWork_TheEnvironmentIsClean(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dump := script(t, dir, "env.sh", `printf '{"status":{"env":"%s"}}' "$WORKER_TOKEN|$SECRET|$DEPLOY_TOKEN|$UNSET_ONE|$EXTRA|$HOME|$CONVERGE_NAME"`)
	worker := map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/home/w", "WORKER_TOKEN": "tok", "SECRET": "s", "DEPLOY_TOKEN": "d"}
	p := stdio.NewWithEnv(manifest.KindVersion{Kind: "script"}, zerolog.Nop(), func(k string) string { return worker[k] })
	cfg := config(t, map[string]any{"command": sh(dump), "pass_env": []string{"DEPLOY_TOKEN", "UNSET_ONE"}, "env": map[string]string{"EXTRA": "x"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := p.Work(ctx, request("web", cfg))
	require.NoError(t, err)
	require.JSONEq(t, `{"env":"||d||x|/home/w|web"}`, string(out.Status))
}
