package stdio

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/converge-run/converge/core/worker"
)

// Program is one run of an external program under the stdio protocol's
// bounds; the built-in providers that run programs (stdshell, stdterraform)
// share it with the stdio provider.
type Program struct {
	// Argv is the program and its arguments, executed directly.
	Argv []string
	// Env is the program's whole environment (nothing is inherited).
	Env []string
	// Dir is the working directory ("" = the worker's).
	Dir string
	// Stdin is written to the program's stdin, which is then closed.
	Stdin []byte
	// Timeout bounds the run on top of ctx (0 = only ctx).
	Timeout time.Duration
	// KillGrace is the time between StopSignal and SIGKILL of the process
	// group (0 = DefaultKillGrace).
	KillGrace time.Duration
	// StopSignal is what the process group gets first when the run is cut
	// short (0 = SIGTERM).
	StopSignal syscall.Signal
	// MaxOutputBytes bounds stdout (0 = DefaultMaxOutputBytes).
	MaxOutputBytes int
}

// Result is a finished run.
type Result struct {
	Stdout []byte
	// Stderr is the last 64 KiB of stderr.
	Stderr   []byte
	ExitCode int // -1 when killed by a signal
	Took     time.Duration
	// TimedOut: the timeout or ctx's deadline cut the run short.
	TimedOut bool
	// OutputTooLarge: stdout passed MaxOutputBytes and the run was stopped.
	OutputTooLarge bool
	// Interrupted is set when the run was cut short otherwise (the task was
	// cancelled, or its pipes failed).
	Interrupted error
}

// StderrTail is the stderr tail formatted for an error message (": …", or
// "" when the program wrote nothing).
func (r Result) StderrTail() string { return stderrSuffix(r.Stderr) }

// Run runs p. The error is non-nil only when the program could not be
// started; every other outcome is described by the Result.
func Run(ctx context.Context, p Program) (Result, error) {
	if len(p.Argv) == 0 || p.Argv[0] == "" {
		return Result{ExitCode: -1}, errors.New("run: empty command")
	}
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	grace, maxOut := p.KillGrace, p.MaxOutputBytes
	if grace <= 0 {
		grace = DefaultKillGrace
	}
	if maxOut <= 0 {
		maxOut = DefaultMaxOutputBytes
	}
	r, err := execute(ctx, p.Argv, p.Env, p.Dir, p.Stdin, maxOut, grace, p.StopSignal)
	if err != nil {
		return Result{ExitCode: -1}, err
	}
	res := Result{Stdout: r.stdout, Stderr: r.stderr, ExitCode: r.exitCode, Took: r.took}
	switch {
	case errors.Is(r.cause, errOutputTooLarge):
		res.OutputTooLarge = true
	case errors.Is(r.cause, context.DeadlineExceeded):
		res.TimedOut = true
	case r.cause != nil:
		res.Interrupted = r.cause
	}
	return res, nil
}

// RunTask runs p for req under the stdio protocol: the task document on
// stdin (p.Stdin is replaced), the outcome document on stdout, and the exit
// code mapped to success, terminal or transient failure as documented in
// cmd/stdworker/README.md. p.Env gets the CONVERGE_* task variables
// appended.
func RunTask(ctx context.Context, req worker.Request, p Program) (worker.Outcome, Result, error) {
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
		p.Timeout = 0
	}
	var deadlineMS int64
	if d, ok := ctx.Deadline(); ok {
		deadlineMS = max(time.Until(d).Milliseconds(), 1)
	}
	task, err := json.Marshal(NewTask(req, deadlineMS))
	if err != nil {
		return worker.Outcome{}, Result{}, worker.Terminal(fmt.Errorf("encode task: %w", err))
	}
	p.Stdin = task
	p.Env = append(p.Env, TaskEnv(req, deadlineMS)...)
	r, err := Run(ctx, p)
	if err != nil {
		// The program could not be started (missing, not executable):
		// retrying is pointless until the config changes.
		return worker.Outcome{}, r, worker.Terminal(err)
	}
	out, err := Interpret(p.Argv[0], r, p.MaxOutputBytes)
	return out, r, err
}
