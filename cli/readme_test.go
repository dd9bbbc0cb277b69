package cli_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

// readmeBlocks returns the command lines of the README's fenced sh blocks
// that follow a <!-- readme-cli --> marker, in order.
func readmeBlocks(t *testing.T) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	defer f.Close()
	var lines []string
	marked, in := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := sc.Text()
		switch {
		case strings.HasPrefix(l, "<!-- readme-cli"):
			marked = true
		case marked && l == "```sh":
			in = true
		case in && l == "```":
			in, marked = false, false
		case in && strings.TrimSpace(l) != "":
			lines = append(lines, l)
		}
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, lines, "the README has readme-cli blocks")
	return lines
}

// TestReadme_CLIWalkthroughRunsAsPrinted runs every command of the
// README's conctl walkthrough, exactly as printed (go run ./cmd/conctl is
// the built binary), with sh, from a directory where examples/ is the
// repository's, against a converge holding the demo as devstack applies it.
// A line that says "# exits 1" must exit 1; every other line must exit 0.
func TestReadme_CLIWalkthroughRunsAsPrinted(t *testing.T) {
	t.Parallel()
	lines := readmeBlocks(t)
	bin := filepath.Join(t.TempDir(), "conctl")
	build := exec.Command("go", "build", "-o", bin, "../cmd/conctl")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "build conctl: %s", out)

	s := startStack(t, stackOpts{})
	must(t, s.conctl("apply", "-f", classicFixtures))
	s.WaitPhase("bom", "acme", resource.PhaseReady, 120*time.Second)

	dir := t.TempDir()
	examples, err := filepath.Abs(filepath.Join("..", "examples"))
	require.NoError(t, err)
	require.NoError(t, os.Symlink(examples, filepath.Join(dir, "examples")))
	for _, line := range lines {
		want := 0
		if strings.HasSuffix(strings.TrimSpace(line), "# exits 1") {
			want = 1
		}
		cmdline := strings.ReplaceAll(line, "go run ./cmd/conctl", bin)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "sh", "-c", cmdline)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CONVERGE_SERVER="+s.server)
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		code := 0
		var exit *exec.ExitError
		if err != nil {
			require.ErrorAs(t, err, &exit, "%s", line)
			code = exit.ExitCode()
		}
		require.Equalf(t, want, code, "README line %q\nstdout:\n%s\nstderr:\n%s", line, stdout.String(), stderr.String())
		if strings.HasSuffix(line, "apply -f acme.yaml") {
			require.Equal(t, "resource/bom/acme unchanged\n", stdout.String(), "the README says so")
		}
	}
}
