// Package stdshell is the built-in provider that runs a script carried in
// the kind's providerconfig bundle: the bundle (the providerconfig's data)
// maps file names to their contents, the files are written to a fresh
// directory per task and the entry script is run by the configured
// interpreter with a clean environment. The script speaks the stdio
// protocol (core/stdio): the task as JSON on stdin, the outcome as JSON on
// stdout (its "status" becomes the resource's status), exit 2 for a
// terminal failure, any other non-zero exit for a transient one. A run is
// bounded by timeout_secs and the task deadline, its stdout by
// max_output_bytes.
package stdshell

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/stdio"
	"github.com/converge-run/converge/core/worker"
)

// Defaults and bounds of the config.
const (
	DefaultEntry     = "main.sh"
	DefaultPath      = "/usr/local/bin:/usr/bin:/bin"
	MaxBundleBytes   = 1 << 20
	MaxBundleFiles   = 256
	DefaultTimeout   = 60 * time.Second
	MaxTimeoutSecs   = 24 * 60 * 60
	maxOutputCeiling = 64 << 20
	maxNamePart      = 255 // NAME_MAX
)

// DefaultInterpreter runs the entry script.
var DefaultInterpreter = []string{"/bin/sh", "-eu"}

// Config is a stdshell providerconfig spec.
type Config struct {
	// Interpreter is the argv the entry file is appended to (default
	// /bin/sh -eu).
	Interpreter []string `json:"interpreter,omitempty"`
	// Entry is the bundle file run for every reaction (default main.sh);
	// Entries overrides it per reaction name.
	Entry   string            `json:"entry,omitempty"`
	Entries map[string]string `json:"entries,omitempty"`
	// TimeoutSecs bounds one run (default 60, at most a day); the task
	// deadline still applies.
	TimeoutSecs float64 `json:"timeout_secs,omitempty"`
	// KillGraceSecs is SIGTERM → SIGKILL (default 2).
	KillGraceSecs float64 `json:"kill_grace_secs,omitempty"`
	// MaxOutputBytes bounds stdout (default 4 MiB, at most 64 MiB).
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// Env is set in the script's environment; PassEnv names worker
	// variables copied into it. Nothing else of the worker's environment is
	// visible.
	Env     map[string]string `json:"env,omitempty"`
	PassEnv []string          `json:"pass_env,omitempty"`
	// Path is the script's PATH (default /usr/local/bin:/usr/bin:/bin).
	Path string `json:"path,omitempty"`
}

// ParseConfig reads and checks a stdshell providerconfig spec.
func ParseConfig(spec json.RawMessage) (Config, error) {
	var c Config
	if len(spec) > 0 && string(spec) != "null" {
		dec := json.NewDecoder(strings.NewReader(string(spec)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return c, fmt.Errorf("providerconfig spec: %w", err)
		}
	}
	if len(c.Interpreter) == 0 {
		c.Interpreter = DefaultInterpreter
	}
	if c.Interpreter[0] == "" {
		return c, errors.New("providerconfig spec: interpreter[0] is empty")
	}
	if c.Entry == "" {
		c.Entry = DefaultEntry
	}
	if c.Path == "" {
		c.Path = DefaultPath
	}
	switch {
	case c.TimeoutSecs < 0 || c.TimeoutSecs > MaxTimeoutSecs:
		return c, fmt.Errorf("providerconfig spec: timeout_secs %v is outside 0..%d", c.TimeoutSecs, MaxTimeoutSecs)
	case c.KillGraceSecs < 0 || c.KillGraceSecs > 60:
		return c, fmt.Errorf("providerconfig spec: kill_grace_secs %v is outside 0..60", c.KillGraceSecs)
	case c.MaxOutputBytes < 0 || c.MaxOutputBytes > maxOutputCeiling:
		return c, fmt.Errorf("providerconfig spec: max_output_bytes %d is outside 0..%d", c.MaxOutputBytes, maxOutputCeiling)
	}
	if err := stdio.CheckEnvNames(c.Env, c.PassEnv); err != nil {
		return c, fmt.Errorf("providerconfig spec: %w", err)
	}
	return c, nil
}

func (c Config) timeout() time.Duration {
	if c.TimeoutSecs == 0 {
		return DefaultTimeout
	}
	return time.Duration(c.TimeoutSecs * float64(time.Second))
}

func (c Config) entry(reaction string) string {
	if e, ok := c.Entries[reaction]; ok && e != "" {
		return e
	}
	return c.Entry
}

// ParseBundle reads a providerconfig's data: file name → contents. Names are
// clean relative slash paths without "..", "." or NUL, each part at most
// 255 bytes, and no name is a directory of another ("lib" beside
// "lib/a.sh"), so that every bundle that passes can be written.
func ParseBundle(data json.RawMessage) (map[string]string, error) {
	if len(data) > MaxBundleBytes {
		return nil, fmt.Errorf("the bundle (providerconfig data) is %d bytes, at most %d", len(data), MaxBundleBytes)
	}
	var files map[string]string
	if len(data) > 0 && string(data) != "null" {
		if err := json.Unmarshal(data, &files); err != nil {
			return nil, fmt.Errorf("the bundle (providerconfig data): want an object of file name → contents: %w", err)
		}
	}
	if len(files) > MaxBundleFiles {
		return nil, fmt.Errorf("the bundle holds %d files, at most %d", len(files), MaxBundleFiles)
	}
	for _, name := range slices.Sorted(maps.Keys(files)) { // the first error is always the same one
		if name == "" || name == "." || path.IsAbs(name) || path.Clean(name) != name || name == ".." || strings.HasPrefix(name, "../") ||
			strings.ContainsRune(name, 0) {
			return nil, fmt.Errorf("the bundle's file name %q must be a clean relative path", name)
		}
		for _, part := range strings.Split(name, "/") {
			if len(part) > maxNamePart {
				return nil, fmt.Errorf("the bundle's file name %q has a part of %d bytes, at most %d", name, len(part), maxNamePart)
			}
		}
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if _, ok := files[dir]; ok {
				return nil, fmt.Errorf("the bundle's file name %q is inside %q, which is a file of the bundle too", name, dir)
			}
		}
	}
	return files, nil
}

// Provider serves one (kind, version) with bundle scripts.
type Provider struct {
	kv     manifest.KindVersion
	log    zerolog.Logger
	getenv func(string) string

	mu    sync.RWMutex
	ready bool
}

// New returns a stdshell provider for kv; getenv reads the worker's
// environment for pass_env (os.Getenv when nil).
func New(kv manifest.KindVersion, log zerolog.Logger, getenv func(string) string) *Provider {
	if kv.Version == "" {
		kv.Version = manifest.DefaultVersion
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	return &Provider{kv: kv, getenv: getenv,
		log: log.With().Str("provider", "stdshell").Str("kind", kv.Kind).Str("version", kv.Version).Logger()}
}

// Kind is the (kind, version) served.
func (p *Provider) Kind() manifest.KindVersion { return p.kv }

// Ready reports whether the default providerconfig is usable.
func (p *Provider) Ready() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.ready
}

// OnConfig checks the default providerconfig: a valid spec whose
// interpreter exists and a bundle holding the entry script.
func (p *Provider) OnConfig(cfg worker.ProviderConfig) {
	err := check(cfg.Spec, cfg.Data)
	p.mu.Lock()
	p.ready = err == nil
	p.mu.Unlock()
	if err != nil {
		p.log.Warn().Err(err).Str("config", cfg.Name).Msg("stdshell kind unready")
		return
	}
	p.log.Info().Str("config", cfg.Name).Msg("stdshell kind ready")
}

func check(spec, data json.RawMessage) error {
	c, err := ParseConfig(spec)
	if err != nil {
		return err
	}
	if _, err := exec.LookPath(c.Interpreter[0]); err != nil {
		return fmt.Errorf("interpreter: %w", err)
	}
	files, err := ParseBundle(data)
	if err != nil {
		return err
	}
	if _, ok := files[c.Entry]; !ok {
		return fmt.Errorf("the bundle (providerconfig data) has no entry file %s", c.Entry)
	}
	return nil
}

// Work writes the bundle to a fresh directory and runs the entry script.
func (p *Provider) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	c, err := ParseConfig(req.Config.Spec)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("config %q: %w", req.Config.Name, err))
	}
	files, err := ParseBundle(req.Config.Data)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("config %q: %w", req.Config.Name, err))
	}
	entry := c.entry(req.Reaction)
	if _, ok := files[entry]; !ok {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("config %q: the bundle has no file %s (the entry for reaction %s)",
			req.Config.Name, entry, req.Reaction))
	}
	dir, err := os.MkdirTemp("", "stdshell-")
	if err != nil {
		return worker.Outcome{}, fmt.Errorf("stdshell: task directory: %w", err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := writeBundle(dir, files); err != nil {
		err = fmt.Errorf("stdshell: write the bundle: %w", err)
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return worker.Outcome{}, err // the disk may free up
		}
		// ParseBundle passed it: the same bundle would fail the same way.
		return worker.Outcome{}, worker.Terminal(err)
	}
	argv := append(append([]string{}, c.Interpreter...), entry)
	out, r, err := stdio.RunTask(ctx, req, stdio.Program{Argv: argv, Env: p.environ(c, dir), Dir: dir, Timeout: c.timeout(),
		KillGrace: time.Duration(c.KillGraceSecs * float64(time.Second)), MaxOutputBytes: c.MaxOutputBytes})
	p.log.Debug().Str("name", req.Resource.Name).Str("stage", string(req.Stage)).Str("entry", entry).Int("exit", r.ExitCode).
		Dur("took", r.Took).Int("stdout_bytes", len(r.Stdout)).Msg("script ran")
	if err != nil {
		return worker.Outcome{}, fmt.Errorf("%s: %w", entry, err)
	}
	return out, nil
}

// environ is the clean environment: PATH, HOME and TMPDIR (the task
// directory), the config's env and pass_env, nothing else of the worker's.
func (p *Provider) environ(c Config, dir string) []string {
	env := []string{"PATH=" + c.Path, "HOME=" + dir, "TMPDIR=" + dir, "LANG=C.UTF-8"}
	return stdio.CleanEnv(env, c.PassEnv, c.Env, p.getenv)
}

func writeBundle(dir string, files map[string]string) error {
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o700); err != nil {
			return err
		}
	}
	return nil
}
