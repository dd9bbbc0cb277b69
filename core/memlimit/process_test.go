package memlimit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestApply_InARealCgroup runs this test binary again inside a new memory
// cgroup with a 512 MiB limit, under the real /proc of a real kernel, and
// checks the soft limit that process's runtime was given. It needs a
// writable cgroup hierarchy (root on a host or in a privileged container);
// without one it says so and skips: the layouts themselves are covered by
// TestCgroupLimit_ReadsEachLayout.
func TestApply_InARealCgroup(t *testing.T) {
	if os.Getenv("MEMLIMIT_HELPER") == "1" {
		res, err := Apply(DefaultRatio)
		out, _ := json.Marshal(map[string]any{"res": res, "err": fmt.Sprint(err), "runtime": debug.SetMemoryLimit(-1)})
		fmt.Println("RESULT " + string(out))
		return
	}
	root := os.DirFS("/")
	cgroups, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		t.Skipf("no /proc/self/cgroup: %v", err)
	}
	mounts, err := fs.ReadFile(root, "proc/self/mountinfo")
	require.NoError(t, err)
	v1, _ := cgroupPaths(string(cgroups))
	mroot, point, ok := mountOf(string(mounts), func(t, o string) bool { return t == "cgroup" && hasOption(o, "memory") })
	if v1 == "" || !ok {
		t.Skip("no cgroup v1 memory hierarchy here (a v2-only host: the v2 layouts are covered by the fixture test)")
	}
	own := path.Join(point, strings.TrimPrefix(v1, mroot))
	dir := path.Join(own, fmt.Sprintf("memlimit-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "read-only") {
			t.Skipf("the memory cgroup %s is not writable here: %v", own, err)
		}
		require.NoError(t, err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })
	require.NoError(t, os.WriteFile(path.Join(dir, "memory.limit_in_bytes"), []byte("536870912"), 0o644))

	// The shell moves itself into the cgroup, then becomes the test binary;
	// 483183820 is 0.9 × 512 MiB, rounded down.
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run '^TestApply_InARealCgroup$' -test.count=1`,
		"sh", dir, os.Args[0])
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GOMEMLIMIT=") }),
		"MEMLIMIT_HELPER=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, line, found := strings.Cut(string(out), "RESULT ")
	require.True(t, found, "%s", out)
	var got struct {
		Res     Result
		Err     string
		Runtime int64
	}
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(line, "\n", 2)[0]), &got))
	require.Equal(t, "<nil>", got.Err)
	require.Equal(t, Result{CgroupLimit: 512 << 20, File: path.Join(dir, "memory.limit_in_bytes"), Soft: 483183820}, got.Res)
	require.Equal(t, got.Res.Soft, got.Runtime, "the runtime holds the soft limit")
}
