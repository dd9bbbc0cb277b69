package stdio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Defaults for the optional config fields.
const (
	DefaultMaxOutputBytes = 4 << 20
	DefaultKillGrace      = 2 * time.Second
	// The caps (as stdshell's): a longer grace or a larger stdout is
	// refused.
	MaxTimeoutSecs    = 24 * 60 * 60
	MaxKillGraceSecs  = 60
	MaxOutputBytesCap = 64 << 20
	// stderrTail is how much of a program's stderr is kept (its end).
	stderrTail = 64 << 10
)

// Config is the stdio part of a kind's providerconfig spec: which program
// runs the kind's tasks and how. The stdworker reads it from the kind's
// default providerconfig, merged per task with a resource's attached one.
type Config struct {
	// Command is the program and its arguments. It is executed directly,
	// never through a shell; a name without a slash is looked up on PATH.
	Command []string `json:"command"`
	// Commands overrides Command for individual reactions, by reaction name.
	Commands map[string][]string `json:"commands,omitempty"`
	// TimeoutSecs bounds one run (0 = only the task deadline applies).
	TimeoutSecs float64 `json:"timeout_secs,omitempty"`
	// KillGraceSecs is how long a program has to exit after SIGTERM before
	// its process group is killed (default 2).
	KillGraceSecs float64 `json:"kill_grace_secs,omitempty"`
	// Env adds variables to the program's environment, which is clean:
	// PATH, HOME, TMPDIR and LANG (the worker's), the CONVERGE_* task
	// variables, PassEnv and Env, nothing else of the worker's (so never
	// its WORKER_TOKEN).
	Env map[string]string `json:"env,omitempty"`
	// PassEnv names worker variables copied in (credentials); an unset
	// one is left out.
	PassEnv []string `json:"pass_env,omitempty"`
	// Dir is the program's working directory (default: the worker's).
	Dir string `json:"dir,omitempty"`
	// MaxOutputBytes bounds stdout (default 4 MiB); more is a terminal
	// failure.
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
}

// ParseConfig reads the stdio fields of a providerconfig spec; other fields
// are left for the program (it receives the whole spec in the task).
func ParseConfig(spec json.RawMessage) (Config, error) {
	var c Config
	if len(bytes.TrimSpace(spec)) == 0 || string(bytes.TrimSpace(spec)) == "null" {
		return c, errors.New("no providerconfig: the kind needs one whose spec has a command")
	}
	if err := json.Unmarshal(spec, &c); err != nil {
		return c, fmt.Errorf("providerconfig spec: %w", err)
	}
	if len(c.Command) == 0 || c.Command[0] == "" {
		return c, errors.New("providerconfig spec: command is empty")
	}
	for _, name := range slices.Sorted(maps.Keys(c.Commands)) { // the first error is always the same one
		if argv := c.Commands[name]; len(argv) == 0 || argv[0] == "" {
			return c, fmt.Errorf("providerconfig spec: commands.%s is empty", name)
		}
	}
	switch {
	case c.TimeoutSecs < 0 || c.TimeoutSecs > MaxTimeoutSecs:
		return c, fmt.Errorf("providerconfig spec: timeout_secs %v is outside 0..%d", c.TimeoutSecs, MaxTimeoutSecs)
	case c.KillGraceSecs < 0 || c.KillGraceSecs > MaxKillGraceSecs:
		return c, fmt.Errorf("providerconfig spec: kill_grace_secs %v is outside 0..%d", c.KillGraceSecs, MaxKillGraceSecs)
	case c.MaxOutputBytes < 0 || c.MaxOutputBytes > MaxOutputBytesCap:
		return c, fmt.Errorf("providerconfig spec: max_output_bytes %d is outside 0..%d", c.MaxOutputBytes, MaxOutputBytesCap)
	}
	if err := CheckEnvNames(c.Env, c.PassEnv); err != nil {
		return c, fmt.Errorf("providerconfig spec: %w", err)
	}
	return c, nil
}

// workerCredential is the worker's own credential variable: never passed
// to a program (a stdworker's WORKER_TOKEN is its worker-plane bearer
// token, for the broker alone).
const workerCredential = "WORKER_TOKEN"

// CheckEnvNames refuses an env or pass_env name that is not a variable
// name (empty, or holding '=' or NUL): "A=B" would set A, silently; and a
// pass_env of the worker's own credential. Every built-in provider that
// runs a program checks its config with it.
func CheckEnvNames(env map[string]string, pass []string) error {
	for _, k := range slices.Sorted(maps.Keys(env)) { // the first error is always the same one
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("env name %q is not a variable name", k)
		}
	}
	for i, k := range pass {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("pass_env[%d] %q is not a variable name", i, k)
		}
		if k == workerCredential {
			return fmt.Errorf("pass_env[%d] %s: the worker's own credential is never passed to a program", i, k)
		}
	}
	return nil
}

// argv is the command for a reaction.
func (c Config) argv(reaction string) []string {
	if a, ok := c.Commands[reaction]; ok {
		return a
	}
	return c.Command
}

func (c Config) timeout() time.Duration { return secs(c.TimeoutSecs) }

func (c Config) killGrace() time.Duration {
	if c.KillGraceSecs == 0 {
		return DefaultKillGrace
	}
	return secs(c.KillGraceSecs)
}

func (c Config) maxOutput() int {
	if c.MaxOutputBytes == 0 {
		return DefaultMaxOutputBytes
	}
	return c.MaxOutputBytes
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
