package cli_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

// demoShell runs command lines as a reader pastes them into a terminal:
// with bash, from a directory where examples/ is the repository's, with the
// conctl built from this tree first on PATH and CONVERGE_SERVER pointing at
// a real converge and the classic demo's worker holding the demo as
// devstack applies it (bom/acme and classicbom/platform Ready). Every line
// of one demoShell shares its working directory, so a file one line writes
// is there for the next.
type demoShell struct {
	*stack
	dir string   // the working directory
	env []string // the environment every line sees
}

// demoEditor is $EDITOR for the lines: it checks the file conctl hands it
// holds something and saves it unchanged, so conctl edit fetches the
// object, opens the editor and cancels (there is no one to type).
const demoEditor = "test -s"

func startDemoShell(t *testing.T) *demoShell {
	t.Helper()
	bin := t.TempDir()
	out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "conctl"), "../cmd/conctl").CombinedOutput()
	require.NoError(t, err, "build conctl: %s", out)

	s := startStack(t, stackOpts{})
	must(t, s.conctl("apply", "-f", classicFixtures))
	// Generous: 3% of the leaves fail transiently and retry with an
	// exponential backoff, which a loaded machine stretches.
	s.WaitPhase("bom", "acme", resource.PhaseReady, 5*time.Minute)
	s.WaitPhase("classicbom", "platform", resource.PhaseReady, 5*time.Minute)

	d := &demoShell{stack: s, dir: t.TempDir()}
	examples, err := filepath.Abs(filepath.Join("..", "examples"))
	require.NoError(t, err)
	require.NoError(t, os.Symlink(examples, filepath.Join(d.dir, "examples")))
	// The process's environment without what would point conctl elsewhere
	// or open a real editor; HOME is a fresh directory, so nothing a line
	// writes under ~ lands in the user's.
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "CONVERGE_"), k == "VISUAL", k == "EDITOR", k == "HOME", k == "PATH":
		default:
			d.env = append(d.env, kv)
		}
	}
	d.env = append(d.env, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+t.TempDir(),
		"EDITOR="+demoEditor, "CONVERGE_SERVER="+s.server)
	return d
}

// shellRun is one line's run.
type shellRun struct {
	code           int // the exit status; -1 when it did not exit on its own
	stdout, stderr string
}

// start starts line (bash -o pipefail: a pipeline fails when any part
// fails) in its own process group.
func (d *demoShell) start(ctx context.Context, line string, stdout, stderr *syncBuffer) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "bash", "-o", "pipefail", "-c", line)
	cmd.Dir, cmd.Env = d.dir, d.env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// run runs line to its end (at most 5 minutes).
func (d *demoShell) run(t *testing.T, line string) shellRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var stdout, stderr syncBuffer
	cmd := d.start(ctx, line, &stdout, &stderr)
	return shellResult(t, cmd.Run(), ctx.Err(), &stdout, &stderr)
}

// shellResult is what a finished command left: its exit status, or -1
// when it was killed because ctxErr ended it.
func shellResult(t *testing.T, err, ctxErr error, stdout, stderr *syncBuffer) shellRun {
	t.Helper()
	r := shellRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctxErr != nil:
		r.code = -1
	case errors.As(err, &exit):
		r.code = exit.ExitCode()
	default:
		require.NoError(t, err, "run bash")
	}
	return r
}

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
// the built binary), in a demoShell. A line that says "# exits 1" must
// exit 1; every other line must exit 0.
func TestReadme_CLIWalkthroughRunsAsPrinted(t *testing.T) {
	t.Parallel()
	lines := readmeBlocks(t)
	d := startDemoShell(t)
	for _, line := range lines {
		want := 0
		if strings.HasSuffix(strings.TrimSpace(line), "# exits 1") {
			want = 1
		}
		r := d.run(t, strings.ReplaceAll(line, "go run ./cmd/conctl", "conctl"))
		require.Equalf(t, want, r.code, "README line %q\nstdout:\n%s\nstderr:\n%s", line, r.stdout, r.stderr)
		if strings.HasSuffix(line, "apply -f acme.yaml") {
			require.Equal(t, "resource/bom/acme unchanged\n", r.stdout, "the README says so")
		}
	}
}
