package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

// asInit runs stdworker as a container's PID 1 would need it to: it starts
// itself as its one child, the worker, forwards it the signals it gets, and
// reaps every process orphaned to it until the worker exits, with whose
// status it then exits. A stdworker image's entrypoint is stdworker, PID 1
// of its container: the processes a run's program leaves in its group are
// killed when the run ends (and a program's children that outlive it), and
// their parent gone, they are reparented to PID 1 — which, as the worker,
// never waited for them: each stayed a zombie for the container's
// lifetime, until its pids limit refused every new program.
func asInit(args []string) int {
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "stdworker: as PID 1: find the executable:", err)
		return 1
	}
	// Handled before the child exists, so none is lost; PID 1 gets no
	// signal it has no handler for.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	cmd := exec.Command(exe, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "stdworker: as PID 1: start the worker:", err)
		return 1
	}
	worker := cmd.Process.Pid
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	// cmd.Wait is never called: this loop waits for every child, the
	// worker included.
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			fmt.Fprintln(os.Stderr, "stdworker: as PID 1: wait:", err)
			return 1
		case pid != worker:
			continue // an orphan, reaped
		case ws.Signaled():
			return 128 + int(ws.Signal())
		default:
			return ws.ExitStatus()
		}
	}
}
