package stdterraform_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/stdterraform"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const networkKind = `{"kind":"network","spec_schema":{"type":"object"},
 "status_schema":{"type":"object"},
 "reactions":[{"name":"apply","trigger":"specChange","emits":["status"]},
              {"name":"destroy","trigger":"deleteRequested","emits":["finalizer"]}],
 "finalizer_name":"stdterraform.converge.dev/network","task_deadline_secs":60}`

// fakeTerraform builds testdata/faketerraform into dir.
func fakeTerraform(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "terraform")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/faketerraform").CombinedOutput()
	require.NoError(t, err, "build the fake terraform: %s", out)
	return bin
}

// TestStdterraform_ConvergesAndDestroysAgainstAServer: under a real
// converge a network resource's spec becomes the module's arguments; init,
// plan and apply run and the outputs become its status; an edited spec
// re-applies; an unsupported
// argument is terminal, a throttled plan transient and retried; deleting
// runs destroy through the finalizer and removes the working directory.
func TestStdterraform_ConvergesAndDestroysAgainstAServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := fakeTerraform(t, dir)
	module := filepath.Join(dir, "modules", "vpc")
	require.NoError(t, os.MkdirAll(module, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(module, "variables.json"),
		[]byte(`[{"name":"cidr","required":true},{"name":"fail_times"}]`), 0o644))
	work, tfLog := filepath.Join(dir, "work"), filepath.Join(dir, "tf.log")

	s := apptest.Start(t, apptest.Options{})
	s.ApplyManifest(networkKind)
	ctx := context.Background()
	spec, _ := json.Marshal(map[string]any{"binary": bin, "module": module, "work_dir": work, "timeout_secs": 60,
		"env": map[string]string{"FAKE_TF_LOG": tfLog}})
	_, _, err := s.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "network", Name: "default", IsDefault: true, Spec: spec})
	require.NoError(t, err)
	p := stdterraform.New(manifest.KindVersion{Kind: "network"}, s.Log, func(k string) string {
		return map[string]string{"AWS_SECRET_ACCESS_KEY": "must-not-leak"}[k]
	})
	s.StartWorker(apptest.Worker{Providers: []worker.Provider{p}})

	apply := func(name, spec string) {
		t.Helper()
		_, _, err := s.Store.ApplyResource(ctx, store.ApplyResourceInput{Kind: "network", Name: name, Spec: json.RawMessage(spec)})
		require.NoError(t, err)
	}
	apply("a", `{"cidr":"10.0.0.0/16"}`)
	apply("bad", `{"cidr":"10.1.0.0/16","bogus":1}`)
	apply("flaky", `{"cidr":"10.2.0.0/16","fail_times":1}`)

	a := s.WaitPhase("network", "a", resource.PhaseReady, 90*time.Second)
	var st map[string]any
	require.NoError(t, json.Unmarshal(a.Status, &st))
	require.Equal(t, "10.0.0.0/16", st["echo_cidr"], "the module's outputs are the status: %s", a.Status)
	firstID := st["id"]
	require.NotEmpty(t, firstID)
	resDir := filepath.Join(work, "network", a.ID.String())
	require.FileExists(t, filepath.Join(resDir, "terraform.tfstate"))
	require.Equal(t, []string{"init", "plan", "apply", "output"}, commands(t, tfLog, a.ID.String()))

	apply("a", `{"cidr":"10.9.0.0/16"}`)
	apptest.WaitFor(t, 90*time.Second, "the edited spec is applied", func() bool {
		r, err := s.Store.GetResource(ctx, "network", "a")
		return err == nil && r.Phase == resource.PhaseReady && strings.Contains(string(r.Status), "10.9.0.0/16")
	})
	require.Equal(t, []string{"init", "plan", "apply", "output", "init", "plan", "apply", "output"}, commands(t, tfLog, a.ID.String()))

	bad := s.WaitPhase("network", "bad", resource.PhaseFailed, 90*time.Second)
	require.True(t, bad.FailureTerminal, "an unsupported argument is a configuration error: terminal")
	require.Contains(t, synced(t, s.Store, bad), `No argument or block type is named "bogus"`)

	flaky := s.WaitPhase("network", "flaky", resource.PhaseReady, 120*time.Second)
	require.Contains(t, string(flaky.Status), "10.2.0.0/16", "the throttled plan was retried")
	require.Equal(t, []string{"init", "plan", "init", "plan", "apply", "output"}, commands(t, tfLog, flaky.ID.String()))

	_, err = s.Store.RequestDeletion(ctx, "network", "a", "test")
	require.NoError(t, err)
	apptest.WaitFor(t, 90*time.Second, "network/a is destroyed and gone", func() bool {
		_, err := s.Store.GetResource(ctx, "network", "a")
		return errors.Is(err, store.ErrNotFound)
	})
	got := commands(t, tfLog, a.ID.String())
	require.Equal(t, []string{"init", "destroy"}, got[len(got)-2:], "the finalizer ran destroy")
	require.NoDirExists(t, resDir, "the working directory is removed")
}

// commands are the terraform commands run in resource id's directory.
func commands(t *testing.T, log, id string) []string {
	t.Helper()
	b, err := os.ReadFile(log)
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if d, cmd, ok := strings.Cut(line, " "); ok && d == id {
			out = append(out, cmd)
		}
	}
	return out
}

func synced(t *testing.T, st *store.Store, r resource.Resource) string {
	t.Helper()
	conds, err := st.Conditions(context.Background(), r.ID)
	require.NoError(t, err)
	for _, c := range conds {
		if c.Type == "Synced" {
			return c.Message
		}
	}
	t.Fatalf("no Synced condition on %s: %+v", r.Name, conds)
	return ""
}

func TestRootModule_SpecBecomesModuleArguments(t *testing.T) {
	t.Parallel()
	c, err := stdterraform.ParseConfig(json.RawMessage(`{"module":"git::https://example.com/vpc.git?ref=v1","version":"",
		"backend":{"type":"s3","config":{"bucket":"tf","key":"{kind}/{name}/{id}.tfstate","encrypt":true}}}`))
	require.NoError(t, err)
	doc, err := stdterraform.RootModule(c, worker.Resource{ID: "r1", Kind: "network", Name: "a", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"module":{"this":{"source":"git::https://example.com/vpc.git?ref=v1","cidr":"10.0.0.0/16"}},
		"output":{"this":{"value":"${module.this}","sensitive":true}},
		"terraform":{"backend":{"s3":{"bucket":"tf","key":"network/a/r1.tfstate","encrypt":true}}}}`, string(doc))
	_, err = stdterraform.RootModule(c, worker.Resource{Spec: json.RawMessage(`{"source":"./evil"}`)})
	require.ErrorContains(t, err, `spec field "source" is a module meta-argument`)
	_, err = stdterraform.RootModule(c, worker.Resource{Spec: json.RawMessage(`[1]`)})
	require.ErrorContains(t, err, "want an object of module arguments")
	for range 30 { // more than one: the first in name order, always
		_, err = stdterraform.RootModule(c, worker.Resource{Spec: json.RawMessage(`{"source":"x","count":1,"for_each":[]}`)})
		require.ErrorContains(t, err, `spec field "count" is a module meta-argument`)
	}
}

func TestParseConfig_RefusesBadConfigs(t *testing.T) {
	t.Parallel()
	for spec, want := range map[string]string{
		``:                                       "it needs a module",
		`{}`:                                     "module is empty",
		`{"module":"m","timeout_secs":-1}`:       "timeout_secs -1 is outside",
		`{"module":"m","backend":{}}`:            "backend.type is empty",
		`{"module":"m","modules":"x"}`:           `unknown field "modules"`,
		`{"module":"m","max_output_bytes":-5}`:   "max_output_bytes -5 is outside",
		`{"module":"m","env":{"TF_VAR_x=1":""}}`: `env name "TF_VAR_x=1" is not a variable name`,
		`{"module":"m","pass_env":["A=B"]}`:      `pass_env[0] "A=B" is not a variable name`,
	} {
		_, err := stdterraform.ParseConfig(json.RawMessage(spec))
		require.ErrorContains(t, err, want, spec)
	}
}

func TestOnConfig_UnreadyWithoutTheBinary(t *testing.T) {
	t.Parallel()
	p := stdterraform.New(manifest.KindVersion{Kind: "k"}, apptest.Logger(t), nil)
	p.OnConfig(worker.ProviderConfig{Spec: json.RawMessage(`{"module":"m","binary":"/no/such/terraform"}`)})
	require.False(t, p.Ready())
	p.OnConfig(worker.ProviderConfig{Spec: json.RawMessage(`{"module":"m","binary":"terraform","path":"/nonexistent"}`)})
	require.False(t, p.Ready())
	p.OnConfig(worker.ProviderConfig{Spec: json.RawMessage(`{"module":"m","binary":"sh"}`)})
	require.True(t, p.Ready(), "a binary found on the config's PATH")
}

// TestRootModule_SpecStringsAreLiteral: terraform's JSON syntax reads
// strings as templates, so every spec string and nested key is escaped;
// the backend (the operator's config) and the output's reference are not.
func TestRootModule_SpecStringsAreLiteral(t *testing.T) {
	t.Parallel()
	c, err := stdterraform.ParseConfig(json.RawMessage(`{"module":"./m","backend":{"type":"local","config":{"path":"{name}.tfstate"}}}`))
	require.NoError(t, err)
	doc, err := stdterraform.RootModule(c, worker.Resource{Name: "a", Spec: json.RawMessage(
		`{"x":"${file(\"/etc/passwd\")}","y":["%{ if true }a%{ endif }"],"z":{"${k}":"$${v}"},"n":123456789012345678}`)})
	require.NoError(t, err)
	require.JSONEq(t, `{"module":{"this":{"source":"./m","x":"$${file(\"/etc/passwd\")}","y":["%%{ if true }a%%{ endif }"],
		"z":{"$${k}":"$$${v}"},"n":123456789012345678}},
		"output":{"this":{"value":"${module.this}","sensitive":true}},
		"terraform":{"backend":{"local":{"path":"a.tfstate"}}}}`, string(doc))
	require.Contains(t, string(doc), "123456789012345678", "a large integer keeps its digits")
}

// TestStdterraform_SpecReachesTheModuleVerbatim runs the real terraform
// (skipped when none is on PATH): a spec string that looks like a template
// — a file() call that would read a worker file, a directive, an escape —
// reaches the module and its outputs exactly as written.
func TestStdterraform_SpecReachesTheModuleVerbatim(t *testing.T) {
	t.Parallel()
	bin := realTerraform(t)
	dir := t.TempDir()
	module := filepath.Join(dir, "mod")
	require.NoError(t, os.MkdirAll(module, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(module, "main.tf"), []byte(`
variable "x" { type = any }
output "x" { value = var.x }
`), 0o644))
	secret := filepath.Join(dir, "secret.txt")
	require.NoError(t, os.WriteFile(secret, []byte("TOP-SECRET"), 0o600))
	spec, _ := json.Marshal(map[string]any{"binary": bin, "module": module, "work_dir": filepath.Join(dir, "work"), "timeout_secs": 120})
	p := stdterraform.New(manifest.KindVersion{Kind: "network"}, zerolog.Nop(), func(string) string { return "" })
	value := map[string]any{"read": `${file("` + secret + `")}`, "directive": "%{ if true }yes%{ endif }",
		"escaped": "$${x} %%{y}", "${key}": []any{"${1 + 1}"}}
	resSpec, _ := json.Marshal(map[string]any{"x": value})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := p.Work(ctx, worker.Request{Stage: worker.StageWork, Reaction: "apply",
		Resource: worker.Resource{ID: "11111111-1111-1111-1111-111111111111", Kind: "network", Version: "v1", Name: "a", Spec: resSpec},
		Config:   worker.EffectiveConfig{Name: "default", Spec: spec}})
	require.NoError(t, err)
	want, _ := json.Marshal(map[string]any{"x": value})
	require.JSONEq(t, string(want), string(out.Status))
	require.NotContains(t, string(out.Status), "TOP-SECRET")
}

// realTerraform is the terraform on PATH; the test is skipped without one.
func realTerraform(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("terraform")
	if err != nil {
		// .ci/run installs terraform and sets CONVERGE_REQUIRE_TERRAFORM:
		// there, these tests cannot skip.
		if os.Getenv("CONVERGE_REQUIRE_TERRAFORM") != "" {
			t.Fatal("no terraform on PATH; CONVERGE_REQUIRE_TERRAFORM is set")
		}
		t.Skip("no terraform on PATH (go install github.com/hashicorp/terraform@v1.5.7 to run it)")
	}
	return bin
}

// TestStdterraform_SpecErrorsAreTerminal runs the real terraform (skipped
// when none is on PATH): a spec the module cannot take — a field it has no
// variable for, a missing required one, a value of the wrong type — fails
// the task terminally with terraform's diagnostic. The root module is
// JSON, where terraform reports an unknown argument as "Extraneous JSON
// object property", not the "Unsupported argument" of HCL: a misspelt spec
// field was a transient failure, retried for ever.
func TestStdterraform_SpecErrorsAreTerminal(t *testing.T) {
	t.Parallel()
	bin := realTerraform(t)
	dir := t.TempDir()
	module := filepath.Join(dir, "mod")
	require.NoError(t, os.MkdirAll(module, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(module, "main.tf"), []byte(`
variable "cidr" { type = string }
output "cidr" { value = var.cidr }
`), 0o644))
	spec, _ := json.Marshal(map[string]any{"binary": bin, "module": module, "work_dir": filepath.Join(dir, "work"), "timeout_secs": 120})
	p := stdterraform.New(manifest.KindVersion{Kind: "network"}, zerolog.Nop(), func(string) string { return "" })
	for name, tc := range map[string]struct{ spec, want string }{
		"an unknown field":    {`{"cidr":"10.0.0.0/16","cidrr":"10.0.0.0/16"}`, `No argument or block type is named "cidrr"`},
		"a missing field":     {`{}`, `The argument "cidr" is required`},
		"a value of bad type": {`{"cidr":{"a":1}}`, "string required"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			_, err := p.Work(ctx, worker.Request{Stage: worker.StageWork, Reaction: "apply",
				Resource: worker.Resource{ID: uuid.NewString(), Kind: "network", Version: "v1", Name: "a", Spec: json.RawMessage(tc.spec)},
				Config:   worker.EffectiveConfig{Name: "default", Spec: spec}})
			require.ErrorContains(t, err, tc.want)
			require.True(t, worker.IsTerminal(err), "a retry cannot fix the spec: %v", err)
		})
	}
}

// TestStdterraform_DeleteAfterARefusedSpec: deleting a resource whose spec
// terraform (or the provider) refuses destroys what was applied, with the
// configuration it was applied with, and a resource never applied is gone
// without running terraform. Destroy ran with the current spec, which
// terraform refuses to load as plan does: the delete failed terminally and
// the resource stayed Deleting for ever (its spec cannot change while it
// is deleted). Run on the fake terraform, and on the real one when on PATH.
func TestStdterraform_DeleteAfterARefusedSpec(t *testing.T) {
	t.Parallel()
	bins := map[string]func(t *testing.T) string{
		"fake": func(t *testing.T) string { return fakeTerraform(t, t.TempDir()) },
		"real": realTerraform,
	}
	for name, bin := range bins {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bin := bin(t)
			dir := t.TempDir()
			module := filepath.Join(dir, "mod")
			require.NoError(t, os.MkdirAll(module, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(module, "variables.json"), []byte(`[{"name":"cidr","required":true}]`), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(module, "main.tf"), []byte(`
variable "cidr" { type = string }
output "cidr" { value = var.cidr }
`), 0o644))
			work, tfLog := filepath.Join(dir, "work"), filepath.Join(dir, "tf.log")
			spec, _ := json.Marshal(map[string]any{"binary": bin, "module": module, "work_dir": work, "timeout_secs": 120,
				"env": map[string]string{"FAKE_TF_LOG": tfLog}})
			p := stdterraform.New(manifest.KindVersion{Kind: "network"}, zerolog.Nop(), func(string) string { return "" })
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			run := func(stage worker.Stage, id, resSpec string) error {
				_, err := p.Work(ctx, worker.Request{Stage: stage, Reaction: string(stage),
					Resource: worker.Resource{ID: id, Kind: "network", Version: "v1", Name: "a", Spec: json.RawMessage(resSpec)},
					Config:   worker.EffectiveConfig{Name: "default", Spec: spec}})
				return err
			}

			applied := uuid.NewString()
			require.NoError(t, run(worker.StageWork, applied, `{"cidr":"10.0.0.0/16"}`))
			require.FileExists(t, filepath.Join(work, "network", applied, "terraform.tfstate"))
			for _, bad := range []string{`{"cidr":"10.0.0.0/16","cidrr":"x"}`, `{"cidr":"10.0.0.0/16","count":2}`} {
				err := run(worker.StageWork, applied, bad)
				require.True(t, worker.IsTerminal(err), "%s: %v", bad, err)
			}
			require.NoError(t, run(worker.StageDelete, applied, `{"cidr":"10.0.0.0/16","count":2}`), "destroyed with the applied configuration")
			require.NoDirExists(t, filepath.Join(work, "network", applied))

			for _, bad := range []string{`{"cidr":"10.0.0.0/16","cidrr":"x"}`, `{"cidr":"10.0.0.0/16","count":2}`} {
				never := uuid.NewString()
				require.True(t, worker.IsTerminal(run(worker.StageWork, never, bad)))
				require.NoError(t, run(worker.StageDelete, never, bad), "%s: never applied, nothing to destroy", bad)
				require.NoDirExists(t, filepath.Join(work, "network", never))
			}
			if name == "fake" {
				require.Equal(t, []string{"init", "plan", "apply", "output", "init", "plan", "init", "destroy"}, commands(t, tfLog, applied))
			}
		})
	}
}

// TestStdterraform_ACutShortApplyStopsGracefully: an apply cut short (here
// by timeout_secs) is interrupted as from a terminal — SIGINT to the
// group, which terraform's provider plugins ignore — and given
// kill_grace_secs (default a minute) to finish its calls in flight and
// save the state. It got SIGTERM, which kills the plugins mid-call, and
// SIGKILL 2 s later.
func TestStdterraform_ACutShortApplyStopsGracefully(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := fakeTerraform(t, dir)
	module := filepath.Join(dir, "mod")
	require.NoError(t, os.MkdirAll(module, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(module, "variables.json"), []byte(`[{"name":"cidr"},{"name":"hang_apply"}]`), 0o644))
	work := filepath.Join(dir, "work")
	spec, _ := json.Marshal(map[string]any{"binary": bin, "module": module, "work_dir": work, "timeout_secs": 1})
	p := stdterraform.New(manifest.KindVersion{Kind: "network"}, zerolog.Nop(), func(string) string { return "" })
	id := uuid.NewString()
	_, err := p.Work(context.Background(), worker.Request{Stage: worker.StageWork, Reaction: "apply",
		Resource: worker.Resource{ID: id, Kind: "network", Version: "v1", Name: "a", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","hang_apply":true}`)},
		Config:   worker.EffectiveConfig{Name: "default", Spec: spec}})
	require.ErrorContains(t, err, "terraform apply: timed out")
	require.False(t, worker.IsTerminal(err), "a timeout is transient")
	require.Contains(t, err.Error(), "Gracefully shutting down", "terraform was interrupted")
	require.FileExists(t, filepath.Join(work, "network", id, "stopped-gracefully"), "terraform had the time to stop gracefully")
}

// TestStdterraform_InitsOfOneWorkDirTakeTurns: terraform's plugin cache
// (<work_dir>/.plugin-cache, shared by every resource of the work_dir) is
// not safe for concurrent use, so the inits that install providers into
// it run one at a time — of any resource, and of two providers (as two
// stdworkers sharing the work_dir would be) — under the flock of
// <work_dir>/.plugin-cache.lock. The fake init fails when another runs on its cache during
// its 1.5 s; the inits ran at once, and all but one failed.
func TestStdterraform_InitsOfOneWorkDirTakeTurns(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := fakeTerraform(t, dir)
	module := filepath.Join(dir, "mod")
	require.NoError(t, os.MkdirAll(module, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(module, "variables.json"), []byte(`[{"name":"cidr"}]`), 0o644))
	work := filepath.Join(dir, "work")
	spec, _ := json.Marshal(map[string]any{"binary": bin, "module": module, "work_dir": work, "timeout_secs": 120,
		"env": map[string]string{"FAKE_TF_INIT_WINDOW": "1500ms"}})
	providers := []*stdterraform.Provider{
		stdterraform.New(manifest.KindVersion{Kind: "network"}, zerolog.Nop(), func(string) string { return "" }),
		stdterraform.New(manifest.KindVersion{Kind: "subnet"}, zerolog.Nop(), func(string) string { return "" }),
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errs := make(chan error, 3)
	for i, kind := range []string{"network", "network", "subnet"} {
		go func() {
			_, err := providers[i/2].Work(ctx, worker.Request{Stage: worker.StageWork, Reaction: "apply",
				Resource: worker.Resource{ID: uuid.NewString(), Kind: kind, Version: "v1", Name: fmt.Sprint("r", i), Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)},
				Config:   worker.EffectiveConfig{Name: "default", Spec: spec}})
			errs <- err
		}()
	}
	for range 3 {
		require.NoError(t, <-errs)
	}

	// An init waits for the lock only as long as its task may run.
	held, err := os.OpenFile(filepath.Join(work, ".plugin-cache.lock"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer held.Close()
	require.NoError(t, syscall.Flock(int(held.Fd()), syscall.LOCK_EX))
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	_, err = providers[0].Work(short, worker.Request{Stage: worker.StageWork, Reaction: "apply",
		Resource: worker.Resource{ID: uuid.NewString(), Kind: "network", Version: "v1", Name: "late", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)},
		Config:   worker.EffectiveConfig{Name: "default", Spec: spec}})
	require.ErrorContains(t, err, "another terraform init holds it")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, worker.IsTerminal(err), "a wait cut short is transient")
}

// TestStdterraform_ADeleteOnAnotherWorkerSaysItHadNoPlan: with a remote
// backend and two stdworkers (here two providers with their own
// work_dir), a delete that lands on the one that never planned the
// resource destroys with the current spec: fine when terraform takes it,
// and when it refuses it (the spec the resource failed on), the terminal
// failure says why — the configuration the state was applied with is kept
// only where it was planned. It carried terraform's diagnostic alone, as if
// the spec were the whole story.
func TestStdterraform_ADeleteOnAnotherWorkerSaysItHadNoPlan(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := fakeTerraform(t, dir)
	module := filepath.Join(dir, "mod")
	require.NoError(t, os.MkdirAll(module, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(module, "variables.json"), []byte(`[{"name":"cidr","required":true}]`), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stdworker := func(name string) func(stage worker.Stage, id, resSpec string) error {
		spec, _ := json.Marshal(map[string]any{"binary": bin, "module": module, "work_dir": filepath.Join(dir, name), "timeout_secs": 120,
			"backend": map[string]any{"type": "s3", "config": map[string]any{"key": "{kind}/{id}.tfstate"}}})
		p := stdterraform.New(manifest.KindVersion{Kind: "network"}, zerolog.Nop(), func(string) string { return "" })
		return func(stage worker.Stage, id, resSpec string) error {
			_, err := p.Work(ctx, worker.Request{Stage: stage, Reaction: string(stage),
				Resource: worker.Resource{ID: id, Kind: "network", Version: "v1", Name: "a", Spec: json.RawMessage(resSpec)},
				Config:   worker.EffectiveConfig{Name: "default", Spec: spec}})
			return err
		}
	}
	a, b := stdworker("a"), stdworker("b")

	good, bad := uuid.NewString(), uuid.NewString()
	for _, id := range []string{good, bad} {
		require.NoError(t, a(worker.StageWork, id, `{"cidr":"10.0.0.0/16"}`))
	}
	require.NoError(t, b(worker.StageDelete, good, `{"cidr":"10.0.0.0/16"}`), "a spec terraform takes: destroyed with it")

	require.True(t, worker.IsTerminal(a(worker.StageWork, bad, `{"cidr":"10.0.0.0/16","cidrr":"x"}`)))
	err := b(worker.StageDelete, bad, `{"cidr":"10.0.0.0/16","cidrr":"x"}`)
	require.True(t, worker.IsTerminal(err), "%v", err)
	require.ErrorContains(t, err, `No argument or block type is named "cidrr"`)
	require.ErrorContains(t, err, "this stdworker never planned the resource")
	require.NoError(t, a(worker.StageDelete, bad, `{"cidr":"10.0.0.0/16","cidrr":"x"}`), "where it was planned, the planned module destroys it")
}
