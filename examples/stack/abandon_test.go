package stack

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Abandon kills every member's whole process group at once, with SIGKILL: a
// member that ignores SIGTERM (one stuck in a drain) and the child it started
// in its group end too, and a Stop that was waiting out its grace on them
// returns as soon as they are gone (Abandon is called while Stop runs: the
// second Ctrl+C of devstack).
func TestAbandon_KillsEveryMembersProcessGroupWhileStopWaits(t *testing.T) {
	t.Parallel()
	s := &Stack{}
	var children []int
	var said []<-chan string
	for _, name := range []string{"control-1", "broker-1", "worker-1"} {
		out, w := io.Pipe()
		// The member says when SIGTERM reaches it and goes on (a drain that
		// does not end); its child in its process group runs until killed.
		p, err := startProcess(name, "/bin/sh", []string{"-c",
			`trap 'echo term' TERM; sleep 1000 & echo "child $!"; while kill -0 $! 2>/dev/null; do wait $!; done`},
			os.Environ(), w)
		require.NoError(t, err)
		t.Cleanup(func() {
			_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
			<-p.done
			_ = w.Close()
		})
		lines := make(chan string, 16)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				_, line, _ := strings.Cut(sc.Text(), "] ")
				lines <- line
			}
		}()
		s.members = append(s.members, &Member{Name: name, Role: "worker", proc: p})
		said = append(said, lines)
		pid, ok := strings.CutPrefix(next(t, lines, name), "child ")
		require.True(t, ok)
		n, err := strconv.Atoi(pid)
		require.NoError(t, err)
		children = append(children, n)
	}

	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop() }()
	last := len(s.members) - 1
	require.Equal(t, "term", next(t, said[last], s.members[last].Name),
		"Stop sent SIGTERM to the last member and waits out its minute")

	s.Abandon()
	for _, m := range s.members {
		select {
		case <-m.proc.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still runs 10s after Abandon", m.Name)
		}
		var ee *exec.ExitError
		require.ErrorAs(t, m.proc.err, &ee, m.Name)
		ws, ok := ee.Sys().(syscall.WaitStatus)
		require.True(t, ok)
		require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%s ended by %v, not SIGKILL", m.Name, ee)
	}
	for i, pid := range children {
		require.Eventually(t, func() bool { return !running(pid) }, 10*time.Second, 5*time.Millisecond,
			"the child %s started in its group is killed too", s.members[i].Name)
	}
	select {
	case err := <-stopped:
		require.ErrorContains(t, err, "signal: killed", "Stop reports the members it did not stop cleanly")
	case <-time.After(10 * time.Second):
		t.Fatal("Stop still waits out its grace after Abandon")
	}
}

// next is the member's next line of output.
func next(t *testing.T, lines <-chan string, name string) string {
	t.Helper()
	select {
	case line, ok := <-lines:
		require.True(t, ok, "%s ended its output", name)
		return line
	case <-time.After(30 * time.Second):
		t.Fatalf("%s printed nothing within 30s", name)
		return ""
	}
}

// running reports whether pid is a process that has not ended (a zombie
// waiting for its reaper has ended).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if errors.Is(err, os.ErrNotExist) {
		return false
	}
	if err != nil {
		return true
	}
	// The state follows the command's closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || (b[i+2] != 'Z' && b[i+2] != 'X')
}
