package stdterraform

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/converge-run/converge/core/stdio"
)

// Defaults and bounds of the config.
const (
	DefaultTimeout   = 30 * time.Minute
	MaxTimeoutSecs   = 24 * 60 * 60
	DefaultKillGrace = time.Minute
	MaxKillGraceSecs = 600
	DefaultPath      = "/usr/local/bin:/usr/bin:/bin"
	maxOutputCeiling = 64 << 20
	// defaultMaxOutput bounds one command's stdout (plans can be chatty).
	defaultMaxOutput = 16 << 20
)

// Config is a stdterraform providerconfig spec.
type Config struct {
	// Binary is terraform, tofu or a path (default: terraform, or tofu
	// when no terraform is on PATH).
	Binary string `json:"binary,omitempty"`
	// Module is the module source: a local path, a git or registry address
	// — anything a module block's source takes.
	Module string `json:"module"`
	// Version pins a registry module's version.
	Version string `json:"version,omitempty"`
	// Outputs, when set, is the list of the module's outputs copied into
	// the status (default: all of them).
	Outputs []string `json:"outputs,omitempty"`
	// Backend is the state backend (default: local state in the resource's
	// working directory). Its config's string values may use {kind},
	// {name} and {id} (the resource's), so one config keys each resource's
	// state apart.
	Backend *Backend `json:"backend,omitempty"`
	// WorkDir is the root of the per-resource working directories (default
	// $STDTERRAFORM_WORK_DIR, else <user cache dir>/converge-stdterraform).
	WorkDir string `json:"work_dir,omitempty"`
	// TimeoutSecs bounds each terraform command (default 1800).
	TimeoutSecs float64 `json:"timeout_secs,omitempty"`
	// KillGraceSecs is how long terraform, interrupted (a timeout, the task
	// deadline, a cancellation), may take to stop gracefully — finish the
	// provider calls in flight and save the state — before it is killed
	// (default 60, at most 600).
	KillGraceSecs float64 `json:"kill_grace_secs,omitempty"`
	// MaxOutputBytes bounds each command's stdout (default 16 MiB).
	MaxOutputBytes int `json:"max_output_bytes,omitempty"`
	// Env is set for terraform; PassEnv names worker variables copied
	// (credentials, TF_TOKEN_*); nothing else of the worker's environment
	// is visible. Path is its PATH.
	Env     map[string]string `json:"env,omitempty"`
	PassEnv []string          `json:"pass_env,omitempty"`
	Path    string            `json:"path,omitempty"`
}

// Backend is a terraform backend block.
type Backend struct {
	Type   string         `json:"type"`
	Config map[string]any `json:"config,omitempty"`
}

// ParseConfig reads and checks a stdterraform providerconfig spec.
func ParseConfig(spec json.RawMessage) (Config, error) {
	var c Config
	if len(spec) == 0 || string(spec) == "null" {
		return c, errors.New("no providerconfig spec: it needs a module")
	}
	dec := json.NewDecoder(strings.NewReader(string(spec)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("providerconfig spec: %w", err)
	}
	switch {
	case strings.TrimSpace(c.Module) == "":
		return c, errors.New("providerconfig spec: module is empty (a module source: a path, git:: or registry address)")
	case c.TimeoutSecs < 0 || c.TimeoutSecs > MaxTimeoutSecs:
		return c, fmt.Errorf("providerconfig spec: timeout_secs %v is outside 0..%d", c.TimeoutSecs, MaxTimeoutSecs)
	case c.KillGraceSecs < 0 || c.KillGraceSecs > MaxKillGraceSecs:
		return c, fmt.Errorf("providerconfig spec: kill_grace_secs %v is outside 0..%d", c.KillGraceSecs, MaxKillGraceSecs)
	case c.MaxOutputBytes < 0 || c.MaxOutputBytes > maxOutputCeiling:
		return c, fmt.Errorf("providerconfig spec: max_output_bytes %d is outside 0..%d", c.MaxOutputBytes, maxOutputCeiling)
	case c.Backend != nil && c.Backend.Type == "":
		return c, errors.New("providerconfig spec: backend.type is empty")
	}
	if err := stdio.CheckEnvNames(c.Env, c.PassEnv); err != nil {
		return c, fmt.Errorf("providerconfig spec: %w", err)
	}
	if c.Path == "" {
		c.Path = DefaultPath
	}
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = defaultMaxOutput
	}
	return c, nil
}

func (c Config) timeout() time.Duration {
	if c.TimeoutSecs == 0 {
		return DefaultTimeout
	}
	return time.Duration(c.TimeoutSecs * float64(time.Second))
}

func (c Config) killGrace() time.Duration {
	if c.KillGraceSecs == 0 {
		return DefaultKillGrace
	}
	return time.Duration(c.KillGraceSecs * float64(time.Second))
}

// binary resolves the terraform binary on the config's PATH.
func (c Config) binary() (string, error) {
	names := []string{c.Binary}
	if c.Binary == "" {
		names = []string{"terraform", "tofu"}
	}
	for _, n := range names {
		if strings.Contains(n, "/") {
			if st, err := os.Stat(n); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return n, nil
			}
			continue
		}
		for _, dir := range filepath.SplitList(c.Path) {
			p := filepath.Join(dir, n)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("no %s on PATH %s", strings.Join(names, " or "), c.Path)
}

func (c Config) workRoot(getenv func(string) string) (string, error) {
	if c.WorkDir != "" {
		return c.WorkDir, nil
	}
	if d := getenv("STDTERRAFORM_WORK_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no work_dir and no user cache dir: %w", err)
	}
	return filepath.Join(d, "converge-stdterraform"), nil
}
