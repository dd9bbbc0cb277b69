package main

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
)

// TestSignalHelperProcess is not a test: TestStopContext re-executes the
// test binary with IMAGES_SIGNAL_HELPER set to run a process whose work
// does not end when its context does (a build stuck after the first
// Ctrl+C), which it signals.
func TestSignalHelperProcess(t *testing.T) {
	if os.Getenv("IMAGES_SIGNAL_HELPER") == "" {
		t.Skip("helper process; runs only when re-executed by the tests")
	}
	ctx, stop := stopContext(context.Background(), "helper")
	defer stop()
	fmt.Println("building")
	<-ctx.Done()
	fmt.Println("stopping")
	select {} // a build that does not stop
}

// TestStopContext_ASecondSignalExitsAtOnce: the first SIGINT or SIGTERM
// ends the context, a second one ends the process at once with 128 + the
// signal's number. signal.NotifyContext swallowed every signal after the
// first until the build returned: a second Ctrl+C did nothing.
func TestStopContext_ASecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	for name, sig := range map[string]syscall.Signal{"SIGINT": syscall.SIGINT, "SIGTERM": syscall.SIGTERM} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			exe, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(exe, "-test.run", "^TestSignalHelperProcess$")
			cmd.Env = append(os.Environ(), "IMAGES_SIGNAL_HELPER=1")
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr strings.Builder
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			lines := make(chan string)
			go func() {
				defer close(lines)
				sc := bufio.NewScanner(out)
				for sc.Scan() {
					lines <- sc.Text()
				}
			}()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				for range lines { // drained so the reader ends
				}
			})
			next := func(want string) {
				t.Helper()
				select {
				case got, ok := <-lines:
					if !ok || got != want {
						t.Fatalf("the helper printed %q (open %v), want %q", got, ok, want)
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("the helper did not print %q within 30s", want)
				}
			}

			next("building")
			must(t, cmd.Process.Signal(sig))
			next("stopping")
			must(t, cmd.Process.Signal(sig))
			exited := make(chan error, 1)
			go func() {
				for range lines { // drained: Wait comes after the pipe's reader is done
				}
				exited <- cmd.Wait()
			}()
			select {
			case err = <-exited:
			case <-time.After(30 * time.Second):
				t.Fatal("the second signal did not end the helper within 30s")
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 128+int(sig) {
				t.Fatalf("exit: %v, want status %d", err, 128+int(sig))
			}
			if !strings.Contains(stderr.String(), "helper: second signal") {
				t.Fatalf("stderr does not say why: %q", stderr.String())
			}
		})
	}
}
