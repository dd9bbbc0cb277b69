package ts_test

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBuild_WithoutNodeSkipsUnlessRequired: on a machine with Go and
// Postgres but no Node (the README's prerequisites for go test ./...), the
// tests that need node skip, naming what is missing; with
// CONVERGE_REQUIRE_NODE set (as CI runs) they fail instead. It re-executes
// this test binary with a PATH that holds neither node nor npm.
func TestBuild_WithoutNodeSkipsUnlessRequired(t *testing.T) {
	t.Parallel()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "CONVERGE_REQUIRE_NODE=") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+t.TempDir())
	run := func(env []string) (int, string) {
		cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestTSSDK_UnitSuite$", "-test.v", "-test.count=1")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode(), string(out)
		}
		require.NoError(t, err, "run the test binary: %s", out)
		return 0, string(out)
	}

	code, out := run(env)
	require.Equal(t, 0, code, "without node the test skips:\n%s", out)
	require.Contains(t, out, "--- SKIP: TestTSSDK_UnitSuite", out)
	require.Contains(t, out, "need Node 20.19+ and npm on PATH", out)

	code, out = run(append(env, "CONVERGE_REQUIRE_NODE=1"))
	require.Equal(t, 1, code, "with CONVERGE_REQUIRE_NODE the test fails:\n%s", out)
	require.Contains(t, out, "--- FAIL: TestTSSDK_UnitSuite", out)
	require.Contains(t, out, "CONVERGE_REQUIRE_NODE is set", out)
}
