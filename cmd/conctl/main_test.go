package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMain runs this test binary as conctl itself when asked to (the test
// below runs it so), so the exit code is the one main hands os.Exit.
func TestMain(m *testing.M) {
	if os.Getenv("CONCTL_TEST_RUN_MAIN") == "1" {
		os.Args = append([]string{"conctl"}, os.Args[1:]...)
		main()
		return
	}
	os.Exit(m.Run())
}

// The process's exit status: 2 for a bad invocation, 1 for every other
// failure, 0 on success (docs/cli.md, "Exit status").
func TestExitStatus_UsageErrorsAre2OtherFailures1(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reason string
		args   []string
		want   int
		stderr string
	}{
		{"help", []string{"--help"}, 0, ""},
		{"an unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"an unknown flag", []string{"get", "res", "--frob"}, 2, "unknown flag: --frob"},
		{"a missing argument", []string{"get"}, 2, "requires at least 1 arg(s)"},
		{"an unknown subcommand of a group", []string{"kind", "confg", "route"}, 2, `unknown command "confg" for "conctl kind"`},
		{"a refused combination of flags", []string{"get", "kinds", "--tls-cert", "c.pem"}, 2, "--tls-cert and --tls-key go together"},
		{"a bad flag value", []string{"get", "res", "-o", "xml"}, 2, `unknown output format "xml"`},
		{"a server that does not answer", []string{"get", "kinds"}, 1, "connection refused"},
		{"a file that cannot be read", []string{"apply", "-f", "/nonexistent/doc.json"}, 1, "read /nonexistent/doc.json"},
	}
	for _, tc := range cases {
		cmd := exec.Command(os.Args[0], tc.args...) //nolint:gosec // the test binary itself, as conctl
		cmd.Env = append(os.Environ(), "CONCTL_TEST_RUN_MAIN=1", "CONVERGE_SERVER=http://127.0.0.1:1", "CONVERGE_TOKEN=")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err, tc.reason)
		}
		require.Equalf(t, tc.want, code, "%s: stderr %q", tc.reason, stderr.String())
		require.Containsf(t, stderr.String(), tc.stderr, tc.reason)
	}
}
