package shutdown_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/shutdown"
)

// TestHelperProcess is not a test: the tests re-execute the test binary
// with SHUTDOWN_HELPER set to run a process whose shutdown never finishes
// (a drain stuck on a task), which they signal.
func TestHelperProcess(t *testing.T) {
	if os.Getenv("SHUTDOWN_HELPER") == "" {
		t.Skip("helper process; runs only when re-executed by the tests")
	}
	ctx, stop := shutdown.Context(context.Background(), "helper", func() { fmt.Println("forced") })
	defer stop()
	fmt.Println("serving")
	<-ctx.Done()
	fmt.Println("draining")
	select {} // a drain that does not end
}

// A process draining after SIGINT or SIGTERM ends at once on a second
// signal, with 128 + the signal's number, having run its force step: an
// operator's second Ctrl+C (or a supervisor's second SIGTERM) is not
// swallowed by a drain that takes its whole budget, or hangs.
func TestContext_ASecondSignalEndsTheProcessAtOnce(t *testing.T) {
	t.Parallel()
	for name, sig := range map[string]syscall.Signal{"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			exe, err := os.Executable()
			require.NoError(t, err)
			cmd := exec.Command(exe, "-test.run", "^TestHelperProcess$")
			cmd.Env = append(os.Environ(), "SHUTDOWN_HELPER=1")
			out, err := cmd.StdoutPipe()
			require.NoError(t, err)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			lines := make(chan string)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			next := func(want string) {
				t.Helper()
				select {
				case got, ok := <-lines:
					require.True(t, ok, "the helper ended before printing %q", want)
					require.Equal(t, want, got)
				case <-time.After(30 * time.Second):
					t.Fatalf("the helper did not print %q within 30s", want)
				}
			}
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				for range lines { // drained so the reader ends
				}
			})

			next("serving")
			require.NoError(t, cmd.Process.Signal(sig))
			next("draining")
			require.NoError(t, cmd.Process.Signal(sig))
			next("forced")
			for range lines { // drained: Wait comes after the pipe's reader is done
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "exit: %v", err)
			require.Equal(t, 128+int(sig), ee.ExitCode())
			require.Contains(t, stderr.String(), "helper: second signal")
		})
	}
}
