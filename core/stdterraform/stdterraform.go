// Package stdterraform is the built-in provider that converges a resource
// by running terraform (or OpenTofu) on a module named in the kind's
// providerconfig. Per resource it keeps a working directory whose root
// module calls the configured module with the resource's spec as its
// arguments; a work task runs init, plan and — when the plan has changes —
// apply, then copies the module's outputs into the resource's status. The
// delete reaction (the kind's finalizer) runs destroy and removes the
// directory. Terraform runs with a clean environment (only the config's env
// and pass_env), each command bounded by timeout_secs and the task
// deadline. A failure is transient (retried) unless terraform reports a
// configuration error a retry cannot fix — an unsupported or missing
// argument, an invalid variable value or module source — which is terminal.
package stdterraform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
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

// RootFile is the generated root module in a resource's directory.
const RootFile = "main.tf.json"

// planFile is the saved plan apply runs.
const planFile = "converge.tfplan"

// pluginCacheLock, in the work_dir beside the plugin cache, is the file
// whose exclusive flock(2) every terraform init holds: terraform's plugin
// cache is not safe for concurrent use, and init is the command that
// installs providers into it.
const pluginCacheLock = ".plugin-cache.lock"

// plannedFile is a copy of the root module of the last plan that succeeded
// in a resource's directory: a configuration terraform took, and the one
// the resource's state was (or is being) applied with. Destroy runs with it
// rather than with the current spec, which may be one terraform refuses
// (or one never applied). Not a .tf.json name, so terraform ignores it.
const plannedFile = "converge.planned.json"

// metaArguments are module block arguments a spec may not set.
var metaArguments = map[string]bool{"source": true, "version": true, "providers": true, "count": true, "for_each": true, "depends_on": true}

// configErrors are terraform diagnostics a retry cannot fix. The root
// module is JSON, where an argument the module does not declare is an
// "Extraneous JSON object property" (HCL's "Unsupported argument").
var configErrors = []string{
	"Extraneous JSON object property", "Unsupported argument", "Missing required argument", "Invalid value for input variable", "Invalid value for variable",
	"Invalid module source address", "Unreadable module directory", "Unsupported block type", "Invalid single-argument block definition",
}

// Provider runs terraform for one (kind, version).
type Provider struct {
	kv     manifest.KindVersion
	log    zerolog.Logger
	getenv func(string) string

	mu    sync.Mutex
	ready bool
	locks map[string]*sync.Mutex
}

// New returns a stdterraform provider for kv; getenv reads the worker's
// environment for pass_env (os.Getenv when nil).
func New(kv manifest.KindVersion, log zerolog.Logger, getenv func(string) string) *Provider {
	if kv.Version == "" {
		kv.Version = manifest.DefaultVersion
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	return &Provider{kv: kv, getenv: getenv, locks: map[string]*sync.Mutex{},
		log: log.With().Str("provider", "stdterraform").Str("kind", kv.Kind).Str("version", kv.Version).Logger()}
}

// Kind is the (kind, version) served.
func (p *Provider) Kind() manifest.KindVersion { return p.kv }

// Ready reports whether the default providerconfig names a module and a
// terraform binary that exists.
func (p *Provider) Ready() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready
}

// OnConfig checks the default providerconfig.
func (p *Provider) OnConfig(cfg worker.ProviderConfig) {
	c, err := ParseConfig(cfg.Spec)
	var bin string
	if err == nil {
		bin, err = c.binary()
	}
	p.mu.Lock()
	p.ready = err == nil
	p.mu.Unlock()
	if err != nil {
		p.log.Warn().Err(err).Str("config", cfg.Name).Msg("stdterraform kind unready")
		return
	}
	p.log.Info().Str("config", cfg.Name).Str("binary", bin).Str("module", c.Module).Msg("stdterraform kind ready")
}

// lock serialises the tasks of one resource (one working directory).
func (p *Provider) lock(id string) func() {
	p.mu.Lock()
	l, ok := p.locks[id]
	if !ok {
		l = &sync.Mutex{}
		p.locks[id] = l
	}
	p.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Work applies (work) or destroys (delete) the resource's module.
func (p *Provider) Work(ctx context.Context, req worker.Request) (worker.Outcome, error) {
	if req.Stage != worker.StageWork && req.Stage != worker.StageDelete {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("stdterraform: reaction %s at stage %s: a stdterraform kind has a work and a delete reaction only",
			req.Reaction, req.Stage))
	}
	c, err := ParseConfig(req.Config.Spec)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("config %q: %w", req.Config.Name, err))
	}
	bin, err := c.binary()
	if err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("config %q: %w", req.Config.Name, err))
	}
	root, err := c.workRoot(p.getenv)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	unlock := p.lock(req.Resource.ID)
	defer unlock()
	dir := filepath.Join(root, req.Resource.Kind, req.Resource.ID)
	r := &runner{bin: bin, dir: dir, root: root, cfg: c, env: p.environ(c, root, dir), log: p.log.With().Str("name", req.Resource.Name).Logger()}
	if req.Stage == worker.StageDelete {
		return worker.Outcome{}, p.destroy(ctx, r, req.Resource, root)
	}
	if err := p.prepare(c, req.Resource, root, dir); err != nil {
		return worker.Outcome{}, err
	}
	if err := r.init(ctx); err != nil {
		return worker.Outcome{}, err
	}
	return r.apply(ctx)
}

// destroy tears the resource's module down and removes its directory. It
// runs with the root module of the last plan that succeeded here
// (plannedFile): the configuration the state was applied with, where the
// current spec may be one terraform or RootModule refuses — the failure
// that left the resource Failed is what its owner deletes it for, and
// destroying with it would fail for good, the resource Deleting for ever.
// Without one, and with local state that does not exist, nothing was ever
// applied: there is nothing to destroy. Without one and with a remote
// backend (another stdworker planned the resource, or none did), destroy
// runs with the current spec; when terraform refuses it, the failure says
// so (withoutPlan).
func (p *Provider) destroy(ctx context.Context, r *runner, res worker.Resource, root string) error {
	current := false // destroying with the current spec, no plan kept here
	switch planned, err := os.ReadFile(filepath.Join(r.dir, plannedFile)); {
	case err == nil:
		if err := os.WriteFile(filepath.Join(r.dir, RootFile), planned, 0o600); err != nil {
			return fmt.Errorf("stdterraform: write %s: %w", RootFile, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("stdterraform: read %s: %w", plannedFile, err)
	case r.cfg.Backend == nil && !exists(filepath.Join(r.dir, "terraform.tfstate")):
		r.log.Info().Msg("terraform never planned here and keeps no state: nothing to destroy")
		return p.forget(r.dir, res.ID)
	default: // state kept elsewhere, or from before plannedFile: the current spec
		current = true
		if err := p.prepare(r.cfg, res, root, r.dir); err != nil {
			return withoutPlan(err)
		}
	}
	err := r.init(ctx)
	if err == nil {
		_, err = r.run(ctx, "destroy", "-input=false", "-no-color", "-auto-approve")
	}
	switch {
	case err != nil && current:
		return withoutPlan(err)
	case err != nil:
		return err
	}
	return p.forget(r.dir, res.ID)
}

// withoutPlan explains a terminal failure of a destroy run with the
// current spec: the configuration the state was applied with is kept only
// where it was planned.
func withoutPlan(err error) error {
	if !worker.IsTerminal(err) {
		return err
	}
	return worker.Terminal(fmt.Errorf("%w; this stdworker never planned the resource (its working directory holds no %s, the root module "+
		"of the last plan), so destroy ran with the current spec: the configuration the state was applied with is in the working "+
		"directory of the stdworker that planned it", err, plannedFile))
}

// forget removes a destroyed resource's directory and lock.
func (p *Provider) forget(dir, id string) error {
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("stdterraform: remove %s: %w", dir, err)
	}
	p.mu.Lock()
	delete(p.locks, id)
	p.mu.Unlock()
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// prepare writes the resource's root module.
func (p *Provider) prepare(c Config, res worker.Resource, root, dir string) error {
	doc, err := RootModule(c, res)
	if err != nil {
		return worker.Terminal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, ".plugin-cache"), 0o700); err != nil {
		return fmt.Errorf("stdterraform: plugin cache: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("stdterraform: working directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, RootFile), doc, 0o600); err != nil {
		return fmt.Errorf("stdterraform: write %s: %w", RootFile, err)
	}
	return nil
}

// RootModule is the generated root module: the configured module called
// with the spec's fields as its arguments, its outputs re-exported whole
// (marked sensitive, so a sensitive output of the module does not fail the
// plan), and the backend, if any. Terraform's JSON syntax reads every
// string (and every object key inside a value) as a template, so the
// spec's are escaped ($${ and %%{): a spec value reaches the module as
// written and can never call a function such as file() on the worker.
// Numbers keep their exact digits.
func RootModule(c Config, res worker.Resource) ([]byte, error) {
	args := map[string]any{}
	if len(res.Spec) > 0 && string(res.Spec) != "null" {
		dec := json.NewDecoder(bytes.NewReader(res.Spec))
		dec.UseNumber()
		if err := dec.Decode(&args); err != nil {
			return nil, fmt.Errorf("spec: want an object of module arguments: %w", err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(args)) { // the first error is always the same one
		v := args[k]
		if metaArguments[k] {
			return nil, fmt.Errorf("spec field %q is a module meta-argument; the module source and version come from the providerconfig", k)
		}
		args[k] = literal(v)
	}
	args["source"] = c.Module
	if c.Version != "" {
		args["version"] = c.Version
	}
	doc := map[string]any{
		"module": map[string]any{"this": args},
		"output": map[string]any{"this": map[string]any{"value": "${module.this}", "sensitive": true}},
	}
	if b := c.Backend; b != nil {
		cfg := map[string]any{}
		for k, v := range b.Config {
			if s, ok := v.(string); ok {
				v = strings.NewReplacer("{kind}", res.Kind, "{name}", res.Name, "{id}", res.ID).Replace(s)
			}
			cfg[k] = v
		}
		doc["terraform"] = map[string]any{"backend": map[string]any{b.Type: cfg}}
	}
	return json.MarshalIndent(doc, "", "  ")
}

// templateEscaper turns template introductions into their literal escapes.
var templateEscaper = strings.NewReplacer("${", "$${", "%{", "%%{")

// literal escapes every string in a JSON value, object keys included, so
// terraform reads it as literal text rather than a template.
func literal(v any) any {
	switch v := v.(type) {
	case string:
		return templateEscaper.Replace(v)
	case []any:
		for i, e := range v {
			v[i] = literal(e)
		}
		return v
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[templateEscaper.Replace(k)] = literal(e)
		}
		return m
	default:
		return v
	}
}

// environ is terraform's clean environment.
func (p *Provider) environ(c Config, root, dir string) []string {
	env := []string{"PATH=" + c.Path, "HOME=" + dir, "TMPDIR=" + os.TempDir(), "TF_IN_AUTOMATION=1", "TF_INPUT=0",
		"CHECKPOINT_DISABLE=1", "TF_PLUGIN_CACHE_DIR=" + filepath.Join(root, ".plugin-cache")}
	return stdio.CleanEnv(env, c.PassEnv, c.Env, p.getenv)
}

// runner runs terraform commands in one resource's directory.
type runner struct {
	bin, dir string
	root     string // the work_dir: the plugin cache and its lock
	cfg      Config
	env      []string
	log      zerolog.Logger
}

// init runs terraform init holding the plugin cache's lock, so that the
// inits sharing a work_dir — of any resource, kind or stdworker process on
// this host — install providers into its cache one at a time.
func (r *runner) init(ctx context.Context) error {
	unlock, err := lockFile(ctx, filepath.Join(r.root, pluginCacheLock))
	if err != nil {
		return err
	}
	defer unlock()
	_, err = r.run(ctx, "init", "-input=false", "-no-color")
	return err
}

// lockFile takes the exclusive flock(2) on path (created if missing),
// waiting for it until ctx ends; the returned func releases it.
func lockFile(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("stdterraform: open the plugin cache lock: %w", err)
	}
	wait := 5 * time.Millisecond
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			return func() { _ = f.Close() }, nil // closing the file releases the lock
		case errors.Is(err, syscall.EINTR):
			continue
		case !errors.Is(err, syscall.EWOULDBLOCK):
			_ = f.Close()
			return nil, fmt.Errorf("stdterraform: lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("stdterraform: wait for the plugin cache lock %s (another terraform init holds it): %w", path, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// run runs one terraform command. Cut short, terraform's process group gets
// SIGINT, as from a terminal's Ctrl-C: terraform stops gracefully (asks
// its providers to stop, waits for their calls in flight, saves the
// state) while the provider plugins ignore it; SIGTERM killed the plugins
// at once, mid-call, and SIGKILL followed after 2 s, losing what they had
// created from the state and leaving a remote state's lock held.
func (r *runner) run(ctx context.Context, args ...string) (stdio.Result, error) {
	res, err := stdio.Run(ctx, stdio.Program{Argv: append([]string{r.bin}, args...), Env: r.env, Dir: r.dir,
		Timeout: r.cfg.timeout(), KillGrace: r.cfg.killGrace(), StopSignal: syscall.SIGINT, MaxOutputBytes: r.cfg.MaxOutputBytes})
	if err != nil {
		return res, worker.Terminal(fmt.Errorf("terraform %s: %w", args[0], err))
	}
	r.log.Debug().Str("command", args[0]).Int("exit", res.ExitCode).Dur("took", res.Took).Msg("terraform ran")
	switch {
	case res.OutputTooLarge:
		return res, worker.Terminal(fmt.Errorf("terraform %s: stdout exceeded %d bytes (max_output_bytes)", args[0], r.cfg.MaxOutputBytes))
	case res.TimedOut:
		return res, fmt.Errorf("terraform %s: timed out after %s and was interrupted%s", args[0], res.Took.Round(time.Millisecond), res.StderrTail())
	case res.Interrupted != nil:
		return res, fmt.Errorf("terraform %s: interrupted: %w", args[0], res.Interrupted)
	case res.ExitCode == 0, args[0] == "plan" && res.ExitCode == 2:
		return res, nil
	}
	err = fmt.Errorf("terraform %s exited %d%s", args[0], res.ExitCode, tail(res))
	for _, marker := range configErrors {
		if strings.Contains(string(res.Stderr), marker) {
			return res, worker.Terminal(err)
		}
	}
	return res, err
}

// tail is the end of stderr, or of stdout when stderr is empty (terraform
// writes some diagnostics to stdout).
func tail(res stdio.Result) string {
	if s := res.StderrTail(); s != "" {
		return s
	}
	return stdio.Result{Stderr: res.Stdout}.StderrTail()
}

// apply plans, applies a plan with changes, and reads the outputs.
func (r *runner) apply(ctx context.Context) (worker.Outcome, error) {
	plan, err := r.run(ctx, "plan", "-input=false", "-no-color", "-detailed-exitcode", "-out="+planFile)
	if err != nil {
		return worker.Outcome{}, err
	}
	// Terraform took this configuration: destroy will run with it.
	doc, err := os.ReadFile(filepath.Join(r.dir, RootFile))
	if err == nil {
		err = os.WriteFile(filepath.Join(r.dir, plannedFile), doc, 0o600)
	}
	if err != nil {
		return worker.Outcome{}, fmt.Errorf("stdterraform: keep the planned %s: %w", RootFile, err)
	}
	changed := plan.ExitCode == 2
	if changed {
		if _, err := r.run(ctx, "apply", "-input=false", "-no-color", "-auto-approve", planFile); err != nil {
			return worker.Outcome{}, err
		}
	}
	_ = os.Remove(filepath.Join(r.dir, planFile))
	out, err := r.run(ctx, "output", "-json", "-no-color")
	if err != nil {
		return worker.Outcome{}, err
	}
	status, err := outputs(out.Stdout, r.cfg.Outputs)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(err)
	}
	r.log.Info().Bool("changed", changed).Int("outputs", len(status)).Msg("terraform converged")
	b, err := json.Marshal(status)
	if err != nil {
		return worker.Outcome{}, worker.Terminal(fmt.Errorf("encode the outputs: %w", err))
	}
	return worker.Outcome{Status: b}, nil
}

// outputs reads `terraform output -json`: the root's one output, the
// module's outputs object, filtered by the allow-list.
func outputs(stdout []byte, allow []string) (map[string]any, error) {
	var doc map[string]struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(stdout, &doc); err != nil {
		return nil, fmt.Errorf("terraform output -json: %w", err)
	}
	values := map[string]any{}
	if this, ok := doc["this"]; ok && len(this.Value) > 0 && string(this.Value) != "null" {
		if err := json.Unmarshal(this.Value, &values); err != nil {
			return nil, fmt.Errorf("terraform output -json: the module's outputs are not an object: %w", err)
		}
	}
	if len(allow) == 0 {
		return values, nil
	}
	kept := map[string]any{}
	var missing []string
	for _, k := range allow {
		v, ok := values[k]
		if !ok {
			missing = append(missing, k)
			continue
		}
		kept[k] = v
	}
	if len(missing) > 0 {
		return nil, errors.New("the module has no output " + strings.Join(missing, ", ") + " (named in the providerconfig's outputs)")
	}
	return kept, nil
}
