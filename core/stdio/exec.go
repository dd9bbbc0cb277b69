package stdio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// errOutputTooLarge cancels a run whose stdout passed its bound.
var errOutputTooLarge = errors.New("stdout exceeded max_output_bytes")

// run is one finished program run.
type run struct {
	stdout   []byte
	stderr   []byte // the tail
	exitCode int    // -1 when killed by a signal or not started
	took     time.Duration
	// cause is why the run was cut short: the context's error (deadline,
	// cancellation) or errOutputTooLarge; nil when the program exited by
	// itself.
	cause error
}

// execute runs argv with stdin, capturing at most maxOut bytes of stdout
// and the last stderrTail bytes of stderr. The program runs in its own
// process group: when ctx ends the group gets stop (SIGTERM when 0), then
// after grace SIGKILL. Whatever the outcome, no process of the group
// outlives the call. The error is non-nil only when the program could not
// be started.
func execute(ctx context.Context, argv []string, env []string, dir string, stdin []byte, maxOut int, grace time.Duration,
	stop syscall.Signal) (run, error) {
	if stop == 0 {
		stop = syscall.SIGTERM
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	out := &headBuffer{max: maxOut, onOverflow: func() { cancel(errOutputTooLarge) }}
	errBuf := &tailBuffer{max: stderrTail}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Stdout = out
	cmd.Stderr = errBuf
	// Its own process group, so the group can be signalled as one; killed
	// with the worker if the worker dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return signalGroup(cmd.Process, stop) }
	// After grace, exec kills the leader and stops waiting for the pipes.
	cmd.WaitDelay = grace

	started := time.Now()
	if err := cmd.Start(); err != nil {
		return run{exitCode: -1}, fmt.Errorf("start %s: %w", argv[0], err)
	}
	// Escalate to the whole group once the grace after cancellation is spent:
	// a child that ignores SIGTERM or holds the pipes open must not linger.
	exited := make(chan struct{})
	stopEscalation := context.AfterFunc(ctx, func() {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
			_ = signalGroup(cmd.Process, syscall.SIGKILL)
		case <-exited:
		}
	})
	waitErr := cmd.Wait()
	close(exited)
	stopEscalation()
	// Sweep anything the program left behind in its group.
	_ = signalGroup(cmd.Process, syscall.SIGKILL)

	r := run{stdout: out.Bytes(), stderr: errBuf.Bytes(), exitCode: cmd.ProcessState.ExitCode(), took: time.Since(started)}
	if c := context.Cause(ctx); c != nil && ctx.Err() != nil {
		r.cause = c
	}
	var ee *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &ee) && r.cause == nil && !errors.Is(waitErr, exec.ErrWaitDelay) {
		// An I/O error copying the pipes: report it as a transient failure.
		r.cause = fmt.Errorf("wait for %s: %w", argv[0], waitErr)
	}
	return r, nil
}

func signalGroup(p *os.Process, sig syscall.Signal) error {
	if p == nil || p.Pid <= 0 {
		return nil
	}
	err := syscall.Kill(-p.Pid, sig)
	if errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// headBuffer keeps the first max bytes written to it and reports the first
// write past them.
type headBuffer struct {
	mu         sync.Mutex
	buf        bytes.Buffer
	max        int
	over       bool
	onOverflow func()
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.over {
		return len(p), nil
	}
	if room := h.max - h.buf.Len(); len(p) > room {
		h.buf.Write(p[:room])
		h.over = true
		h.onOverflow()
		return len(p), nil
	}
	h.buf.Write(p)
	return len(p), nil
}

func (h *headBuffer) Bytes() []byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	return bytes.Clone(h.buf.Bytes())
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu    sync.Mutex
	buf   []byte
	max   int
	trunc bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.trunc = true
	}
	return len(p), nil
}

func (t *tailBuffer) Bytes() []byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.trunc {
		return append([]byte("…"), t.buf...)
	}
	return bytes.Clone(t.buf)
}
