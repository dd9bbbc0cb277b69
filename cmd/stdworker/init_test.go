package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
)

// TestStdworker_AsPID1ReapsOrphans runs the built stdworker as PID 1 of its
// own PID namespace, as the image's entrypoint runs in a container: a
// script's background child, killed when the script's run ends and
// orphaned to PID 1, is reaped. It stayed a zombie for good (one per run:
// in time the container's pids limit refuses every program). Needs a PID
// namespace (unshare --pid, as root); skipped without one.
func TestStdworker_AsPID1ReapsOrphans(t *testing.T) {
	t.Parallel()
	if out, err := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("no PID namespace for the test (unshare --pid --fork needs root): %v: %s", err, out)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "stdworker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "build stdworker: %s", out)

	p := apptest.Start(t, apptest.Options{}).Process
	ctx := context.Background()
	_, _, err = p.Store.ApplyManifest(ctx, []byte(`{"kind":"orphan","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`))
	require.NoError(t, err)
	bundle, _ := json.Marshal(map[string]string{"main.sh": `sleep 600 &
printf '{"status":{"pid":%s}}\n' "$!"
`})
	_, _, err = p.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "orphan", Name: "default", IsDefault: true,
		Spec: json.RawMessage(`{"path":"/usr/bin:/bin"}`), Data: bundle})
	require.NoError(t, err)

	var logs bytes.Buffer
	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", "--kill-child",
		bin, "--broker", apptest.BrokerURL(p), "--kind", "orphan=stdshell", "--drain-timeout", "5s")
	cmd.Env = append(os.Environ(), "LOG_LEVEL=warn", "LOG_FORMAT=json", "WORKER_TOKEN="+apptest.WorkerToken)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	init := initPID(t, cmd.Process.Pid)
	t.Cleanup(func() {
		// unshare ignores SIGTERM and waits for its child: stop the child,
		// which forwards it to the worker; kill the namespace if it hangs.
		_ = syscall.Kill(init, syscall.SIGTERM)
		select {
		case err := <-done:
			require.NoError(t, err, "stdworker exits cleanly on SIGTERM, forwarded by its init; logs:\n%s", logs.String())
		case <-time.After(30 * time.Second):
			t.Errorf("stdworker did not stop on SIGTERM; logs:\n%s", logs.String())
			_ = syscall.Kill(init, syscall.SIGKILL)
			t.Logf("stdworker killed: %v", <-done)
		}
	})

	_, _, err = p.Store.ApplyResource(ctx, store.ApplyResourceInput{Kind: "orphan", Name: "o", Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)
	r := apptest.WaitPhase(t, p.Store, "orphan", "o", resource.PhaseReady, 90*time.Second)
	var st struct{ PID int }
	require.NoError(t, json.Unmarshal(r.Status, &st), "%s", r.Status)
	require.NotZero(t, st.PID, "the script started its background child: %s", r.Status)

	apptest.WaitFor(t, 20*time.Second, "the orphaned background child is reaped, no zombie left", func() bool {
		return !inNamespace(init, st.PID)
	})
	require.NotContains(t, logs.String(), "as PID 1", "logs:\n%s", logs.String())
}

// initPID is the PID 1 of the namespace unshare made: its child.
func initPID(t *testing.T, unshare int) int {
	t.Helper()
	var pid int
	apptest.WaitFor(t, 10*time.Second, "unshare's child", func() bool {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(unshare) + "/task/" + strconv.Itoa(unshare) + "/children")
		if err != nil {
			return false
		}
		f := strings.Fields(string(b))
		if len(f) == 0 {
			return false
		}
		pid, err = strconv.Atoi(f[0])
		return err == nil
	})
	return pid
}

// inNamespace reports whether a process (running or a zombie) has pid nsPID
// in the PID namespace whose init is init.
func inNamespace(init, nsPID int) bool {
	ns, err := os.Readlink("/proc/" + strconv.Itoa(init) + "/ns/pid")
	if err != nil {
		return false
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		if l, err := os.Readlink("/proc/" + e.Name() + "/ns/pid"); err != nil || l != ns {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "NSpid:"); ok {
				f := strings.Fields(rest)
				if len(f) > 0 && f[len(f)-1] == strconv.Itoa(nsPID) {
					return true
				}
			}
		}
	}
	return false
}
