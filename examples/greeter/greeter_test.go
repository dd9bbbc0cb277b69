package greeter_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/stdio"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/greeter"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const guide = "../../docs/implementing-a-provider.md"

// guideFiles reads the guide's code blocks marked <!-- file: NAME -->.
func guideFiles(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(guide)
	require.NoError(t, err)
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	name, in := "", false
	var b strings.Builder
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "<!-- file: "):
			name = strings.TrimSuffix(strings.TrimPrefix(line, "<!-- file: "), " -->")
		case name != "" && !in && strings.HasPrefix(line, "```"):
			in = true
			b.Reset()
		case in && line == "```":
			out[name], name, in = b.String(), "", false
		case in:
			b.WriteString(line + "\n")
		}
	}
	require.NoError(t, sc.Err())
	return out
}

// TestGuide_GoBlocksAreThisPackage: the Go code the guide shows is exactly
// the code these tests run.
func TestGuide_GoBlocksAreThisPackage(t *testing.T) {
	t.Parallel()
	files := guideFiles(t)
	for _, name := range []string{"examples/greeter/greeter.go", "examples/greeter/cmd/worker/main.go"} {
		want, err := os.ReadFile(filepath.Join("../..", name))
		require.NoError(t, err)
		require.Equal(t, string(want), files[name], "the guide's %s is out of date", name)
	}
	for _, name := range []string{"greet.sh", "shellgreeting.kind.json", "shellgreeting.config.json"} {
		require.NotEmpty(t, files[name], name)
	}
}

func TestGreeter_ConvergesFollowsItsConfigAndRefusesBadSpecs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := apptest.Start(t, apptest.Options{})
	raw, err := json.Marshal(greeter.Manifest())
	require.NoError(t, err)
	s.ApplyManifest(string(raw))
	w := &configSeen{Provider: greeter.Provider{}}
	s.StartWorker(apptest.Worker{Providers: []worker.Provider{w}})
	a := apply.StoreApplier{Store: s.Store, Actor: "test"}
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: greeter.Kind, Name: "world", Spec: json.RawMessage(`{"name":"world"}`)}))
	r := s.WaitPhase(greeter.Kind, "world", resource.PhaseReady, time.Minute)
	require.JSONEq(t, `{"message":"Hello, world!"}`, string(r.Status))

	// The guide's live config edit.
	require.NoError(t, a.ApplyProviderConfig(ctx, apply.ProviderConfig{Kind: greeter.Kind, Name: "default", IsDefault: true,
		Spec: json.RawMessage(`{"salutation":"Howdy"}`)}))
	apptest.WaitFor(t, 30*time.Second, "the worker gets the config", func() bool { return w.has("Howdy") })
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: greeter.Kind, Name: "world", Spec: json.RawMessage(`{"name":"world","shout":true}`)}))
	apptest.WaitFor(t, time.Minute, "the resource is greeted again", func() bool {
		r, err := s.Store.GetResource(ctx, greeter.Kind, "world")
		return err == nil && r.Phase == resource.PhaseReady && strings.Contains(string(r.Status), "HOWDY, WORLD!")
	})

	// The derived schema refuses what the struct does not allow.
	for _, spec := range []string{`{"name":""}`, `{"name":"a","colour":"red"}`, `{}`} {
		err := a.ApplyResource(ctx, apply.Resource{Kind: greeter.Kind, Name: "bad", Spec: json.RawMessage(spec)})
		require.ErrorIs(t, err, store.ErrInvalid, spec)
	}
	_, err = s.Store.GetResource(ctx, greeter.Kind, "bad")
	require.True(t, errors.Is(err, store.ErrNotFound), "nothing was written")
}

// TestGuide_ShellKindThroughStdworker runs the guide's shell kind: its
// script, manifest and providerconfig, served by the stdworker provider.
func TestGuide_ShellKindThroughStdworker(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	files := guideFiles(t)
	script := filepath.Join(t.TempDir(), "greet.sh")
	require.NoError(t, os.WriteFile(script, []byte(files["greet.sh"]), 0o755))
	s := apptest.Start(t, apptest.Options{})
	s.ApplyManifest(files["shellgreeting.kind.json"])
	a := apply.StoreApplier{Store: s.Store, Actor: "test"}
	var pc apply.ProviderConfig
	require.NoError(t, json.Unmarshal([]byte(strings.ReplaceAll(files["shellgreeting.config.json"], "/tmp/greet.sh", script)), &pc))
	require.NoError(t, a.ApplyProviderConfig(ctx, pc))
	s.StartWorker(apptest.Worker{Providers: []worker.Provider{
		stdio.New(manifest.KindVersion{Kind: "shellgreeting", Version: manifest.DefaultVersion}, s.Log)}})
	require.NoError(t, a.ApplyResource(ctx, apply.Resource{Kind: "shellgreeting", Name: "shell", Spec: json.RawMessage(`{"name":"shell"}`)}))
	r := s.WaitPhase("shellgreeting", "shell", resource.PhaseReady, time.Minute)
	require.JSONEq(t, `{"message":"Hello, shell!"}`, string(r.Status))
}

// configSeen records the last default providerconfig pushed to a provider.
type configSeen struct {
	worker.Provider
	mu   sync.Mutex
	last string
}

func (c *configSeen) OnConfig(cfg worker.ProviderConfig) {
	c.mu.Lock()
	c.last = string(cfg.Spec)
	c.mu.Unlock()
	c.Provider.OnConfig(cfg)
}

func (c *configSeen) has(s string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Contains(c.last, s)
}
