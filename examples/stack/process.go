package stack

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// process is a supervised child process in its own process group (so a
// terminal's Ctrl+C reaches only the stack, which stops the children in
// order), killed with the stack if the stack dies.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	// stopped is set by stop (called from one goroutine: the stack's owner).
	stopped bool
}

func startProcess(name, bin string, args, env []string, out io.Writer) (*process, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	w := &prefixWriter{prefix: []byte("[" + name + "] "), out: out}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		w.flush()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *process) Pid() int { return p.cmd.Process.Pid }

// exited reports the exit error once the process has ended.
func (p *process) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// stop sends SIGTERM and waits up to grace for a clean exit, then kills the
// whole process group. It returns the exit error of a process that did not
// stop cleanly.
func (p *process) stop(grace time.Duration) error {
	p.stopped = true
	if ok, _ := p.exited(); !ok {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within %s; killed", p.name, grace)
	}
	// Sweep anything it left in its group.
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	var ee *exec.ExitError
	if p.err != nil && (!errors.As(p.err, &ee) || ee.ExitCode() != 0) {
		return fmt.Errorf("%s exited: %w", p.name, p.err)
	}
	return nil
}

// prefixWriter writes whole lines to out, each prefixed with prefix.
type prefixWriter struct {
	mu     sync.Mutex
	prefix []byte
	out    io.Writer
	buf    []byte
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := append(append([]byte{}, w.prefix...), w.buf[:i+1]...)
		if _, err := w.out.Write(line); err != nil {
			return len(b), nil // a closed log sink must not kill the child
		}
		w.buf = w.buf[i+1:]
	}
	return len(b), nil
}

func (w *prefixWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		_, _ = w.out.Write(append(append(append([]byte{}, w.prefix...), w.buf...), '\n'))
		w.buf = nil
	}
}

// rssMB reads a process's peak resident set size (VmHWM) in MiB, or its
// current one (VmRSS) when peak=false.
func rssMB(pid int, peak bool) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, fmt.Errorf("read status of pid %d: %w", pid, err)
	}
	key := []byte("VmRSS:")
	if peak {
		key = []byte("VmHWM:")
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if rest, ok := bytes.CutPrefix(line, key); ok {
			var kb float64
			if _, err := fmt.Sscan(string(rest), &kb); err != nil {
				return 0, fmt.Errorf("parse %s of pid %d: %w", key, pid, err)
			}
			return kb / 1024, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", key, pid)
}
