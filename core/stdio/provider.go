// Package stdio is the provider behind cmd/stdworker: it serves a kind by
// running an external program per task. The task goes to the program as one
// JSON document on stdin, the outcome comes back as one JSON document on
// stdout, and the exit code (or the document's "error" field) tells success,
// terminal and transient failure apart. Which program runs comes from the
// kind's providerconfig (see Config); the protocol is documented in
// cmd/stdworker/README.md.
//
// No shell is involved: the command is an argv array executed directly. A
// run is bounded by the task deadline and the config's timeout_secs, its
// stdout by max_output_bytes, and its stderr is kept only as a tail for the
// error message.
package stdio

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
)

// maxErrStderr is how much of the stderr tail goes into an error message.
const maxErrStderr = 2048

// Provider runs one (kind, version)'s tasks as external programs.
type Provider struct {
	kv  manifest.KindVersion
	log zerolog.Logger

	mu    sync.RWMutex
	ready bool
	// getenv reads the worker's environment (for the base variables and
	// pass_env).
	getenv func(string) string
}

// New returns a provider for kv. It is unready until the kind's default
// providerconfig names a command that exists.
func New(kv manifest.KindVersion, log zerolog.Logger) *Provider {
	return NewWithEnv(kv, log, os.Getenv)
}

// NewWithEnv is New reading the worker's environment through getenv.
func NewWithEnv(kv manifest.KindVersion, log zerolog.Logger, getenv func(string) string) *Provider {
	if kv.Version == "" {
		kv.Version = manifest.DefaultVersion
	}
	return &Provider{kv: kv, log: log.With().Str("kind", kv.Kind).Str("version", kv.Version).Logger(), getenv: getenv}
}

// Kind is the (kind, version) served.
func (p *Provider) Kind() manifest.KindVersion { return p.kv }

// Ready reports whether the default providerconfig names a runnable command.
func (p *Provider) Ready() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ready
}

// OnConfig checks the default providerconfig: the kind serves only while it
// names a command that can be found.
func (p *Provider) OnConfig(cfg worker.ProviderConfig) {
	c, err := ParseConfig(cfg.Spec)
	if err == nil {
		_, err = exec.LookPath(c.Command[0])
	}
	p.mu.Lock()
	p.ready = err == nil
	p.mu.Unlock()
	if err != nil {
		p.log.Warn().Err(err).Str("config", cfg.Name).Msg("stdio kind unready: its default providerconfig names no runnable command")
		return
	}
	p.log.Info().Str("config", cfg.Name).Strs("command", c.Command).Msg("stdio kind ready")
}

// Work runs the program for one task.
func (p *Provider) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	cfg, err := ParseConfig(req.Config.Spec)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("config %q: %w", req.Config.Name, err))
	}
	out, r, err := RunTask(ctx, req, Program{Argv: cfg.argv(req.Reaction), Env: p.environ(cfg), Dir: cfg.Dir,
		Timeout: cfg.timeout(), KillGrace: cfg.killGrace(), MaxOutputBytes: cfg.maxOutput()})
	p.log.Debug().Str("name", req.Resource.Name).Str("stage", string(req.Stage)).Int("exit", r.ExitCode).
		Dur("took", r.Took).Int("stdout_bytes", len(r.Stdout)).Bytes("stderr", r.Stderr).Msg("program ran")
	return out, err
}

// environ is the program's clean environment: the worker's PATH, HOME,
// TMPDIR and LANG (when set), pass_env's variables and env, nothing else of
// the worker's; RunTask adds the CONVERGE_* variables.
func (p *Provider) environ(c Config) []string {
	return CleanEnv(nil, append([]string{"PATH", "HOME", "TMPDIR", "LANG"}, c.PassEnv...), c.Env, p.getenv)
}

// CleanEnv is a program's clean environment, the built-in providers' one
// shape: base, then each of pass (a name of the worker's environment) that
// getenv finds set, then env (the config's own variables) in name order.
// Nothing else of the worker's environment, its credentials included.
func CleanEnv(base, pass []string, env map[string]string, getenv func(string) string) []string {
	out := base
	for _, k := range pass {
		if v := getenv(k); v != "" {
			out = append(out, k+"="+v)
		}
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

// Interpret maps a finished run of a stdio-protocol program to an outcome
// or a failure (maxOut is the stdout bound it ran with, for the message).
func Interpret(prog string, r Result, maxOut int) (worker.Outcome, error) {
	if maxOut <= 0 {
		maxOut = DefaultMaxOutputBytes
	}
	switch {
	case r.OutputTooLarge:
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("%s: stdout exceeded %d bytes (max_output_bytes)", prog, maxOut))
	case r.TimedOut:
		return worker.Outcome{}, fmt.Errorf("%s: timed out after %s and was killed%s", prog, r.Took.Round(time.Millisecond), r.StderrTail())
	case r.Interrupted != nil:
		return worker.Outcome{}, fmt.Errorf("%s: interrupted: %w", prog, r.Interrupted)
	}
	o, perr := ParseOutcome(r.Stdout)
	if o.Error != nil {
		msg := o.Error.Message
		if msg == "" {
			msg = "failed (no message)"
		}
		err := fmt.Errorf("%s: %s", prog, msg)
		if o.Error.Terminal {
			return worker.Outcome{}, worker.Terminal(err)
		}
		return worker.Outcome{}, err
	}
	switch code := r.ExitCode; {
	case code == 0 && perr != nil:
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("%s: %w", prog, perr))
	case code == 0:
		return o.Outcome(), nil
	case code == ExitTerminal:
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("%s exited %d (terminal)%s", prog, code, r.StderrTail()))
	case code < 0:
		return worker.Outcome{}, fmt.Errorf("%s was killed by a signal%s", prog, r.StderrTail())
	default:
		return worker.Outcome{}, fmt.Errorf("%s exited %d%s", prog, code, r.StderrTail())
	}
}

func stderrSuffix(stderr []byte) string {
	s := strings.TrimSpace(string(stderr))
	if s == "" {
		return ""
	}
	if len(s) > maxErrStderr {
		s = "…" + s[len(s)-maxErrStderr:]
	}
	return ": " + s
}

// TaskEnv is the CONVERGE_* variables describing req.
func TaskEnv(req worker.Request, deadlineMS int64) []string {
	return []string{
		"CONVERGE_PROTOCOL=" + ProtocolVersion,
		"CONVERGE_STAGE=" + string(req.Stage),
		"CONVERGE_REACTION=" + req.Reaction,
		"CONVERGE_KIND=" + req.Resource.Kind,
		"CONVERGE_VERSION=" + req.Resource.Version,
		"CONVERGE_NAME=" + req.Resource.Name,
		"CONVERGE_GENERATION=" + strconv.FormatInt(req.Resource.Generation, 10),
		"CONVERGE_DEADLINE_MS=" + strconv.FormatInt(deadlineMS, 10),
	}
}
