package main_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
)

const (
	greeterKind = `{"kind":"greeter","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`
	pairKind = `{"kind":"pair","spec_schema":{"type":"object"},
 "reactions":[{"name":"compose","trigger":"specChange","emits":["children","edges","status"]},
              {"name":"rollup","trigger":"childrenSettled","emits":["status","conditions"]}]}`
	// greeter.sh greets spec.to, or the world; a greeting is its status.
	greeterSh = `task=$(cat)
to=$(printf '%s' "$task" | sed -n 's/.*"spec":{[^}]*"to":"\([^"]*\)".*/\1/p')
printf '{"status":{"greeting":"hello %s from %s"}}\n' "${to:-world}" "$CONVERGE_NAME"
`
	// pairGraph: the second greeter greets whatever the first said.
	pairGraph = `{"resources":[
  {"id":"first","kind":"greeter","spec":{}},
  {"id":"second","kind":"greeter","spec":{"to":"${first.status.greeting}"}}],
 "status":{"said":"${second.status.greeting}"}}`
)

// TestStdworker_BuiltinProvidersEndToEnd runs the built binary serving a
// stdshell kind and a stdcel composite of it against a real converge.
func TestStdworker_BuiltinProvidersEndToEnd(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	bin := filepath.Join(dir, "stdworker")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "build stdworker: %s", out)

	p := apptest.Start(t, apptest.Options{}).Process
	ctx := context.Background()
	for _, m := range []string{greeterKind, pairKind} {
		_, _, err := p.Store.ApplyManifest(ctx, []byte(m))
		require.NoError(t, err)
	}
	bundle, _ := json.Marshal(map[string]string{"main.sh": greeterSh})
	_, _, err = p.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "greeter", Name: "default", IsDefault: true,
		Spec: json.RawMessage(`{"timeout_secs":10}`), Data: bundle})
	require.NoError(t, err)
	_, _, err = p.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "pair", Name: "default", IsDefault: true, Spec: json.RawMessage(pairGraph)})
	require.NoError(t, err)

	startStdworker(t, bin, apptest.BrokerURL(p), "greeter=stdshell", "pair/v1=stdcel")
	_, _, err = p.Store.ApplyResource(ctx, store.ApplyResourceInput{Kind: "pair", Name: "duo", Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)

	apptest.WaitPhase(t, p.Store, "greeter", "duo-second", resource.PhaseReady, 90*time.Second)
	first := apptest.WaitPhase(t, p.Store, "greeter", "duo-first", resource.PhaseReady, time.Second)
	require.JSONEq(t, `{"greeting":"hello world from duo-first"}`, string(first.Status))
	apptest.WaitFor(t, 60*time.Second, "the pair rolls up what the second greeter said", func() bool {
		r, err := p.Store.GetResource(ctx, "pair", "duo")
		if err != nil || r.Phase != resource.PhaseReady {
			return false
		}
		var st map[string]any
		_ = json.Unmarshal(r.Status, &st)
		return st["said"] == "hello hello world from duo-first from duo-second"
	})
}

func TestStdworker_RefusesAnUnknownProvider(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "run", ".", "--broker", "http://127.0.0.1:1", "--kind", "vpc=stdpython").CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), `unknown provider "stdpython" (the built-in providers: stdio, stdshell, stdterraform, stdcel, stdstarlark)`)
}

// TestStdworker_HelpIsNoError: --help prints the usage, with the settings
// read from the environment, and exits 0 (it printed "stdworker: flag: help
// requested" and exited 1).
func TestStdworker_HelpIsNoError(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "run", ".", "--help").CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "usage: stdworker")
	require.Contains(t, string(out), "WORKER_HEALTH_ADDR")
	require.NotContains(t, string(out), "help requested")
}
