package app_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/worker"
)

// Two leaf kinds, one reading only its spec, and two composites of one of
// each, whose rollups read different parts.
const (
	leanKind = `{"kind":"lean","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"],"reads":["spec"]}]}`
	fullKind = `{"kind":"full","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`
	specRollupKind = `{"kind":"specroll","spec_schema":{"type":"object"},
 "reactions":[{"name":"compose","trigger":"specChange","emits":["children","status"]},
              {"name":"rollup","trigger":"childrenSettled","emits":["status"],"reads":["spec"]}]}`
	childStatusRollupKind = `{"kind":"statusroll","spec_schema":{"type":"object"},
 "reactions":[{"name":"compose","trigger":"specChange","emits":["children","status"]},
              {"name":"rollup","trigger":"childrenSettled","emits":["status"],"reads":["childStatus"]}]}`
)

// Each handler reports in its status what it was sent.
func sentParts(_ context.Context, r worker.Request) (worker.Outcome, error) {
	switch r.Stage {
	case worker.StageWork:
		return worker.Outcome{Status: js(map[string]any{"spec": r.Resource.Spec != nil, "labels": r.Resource.Labels})}, nil
	case worker.StageCompose:
		labels := map[string]string{"team": "t1"}
		return worker.Outcome{Status: js(map[string]any{"phase": "composed"}), Children: []worker.Child{
			{Kind: "lean", Name: r.Resource.Name + "-lean", Labels: labels, Spec: js(map[string]any{"n": 1})},
			{Kind: "full", Name: r.Resource.Name + "-full", Labels: labels, Spec: js(map[string]any{"n": 2})},
		}}, nil
	case worker.StageRollup:
		var children []string
		for _, c := range r.Children {
			children = append(children, fmt.Sprintf("%s/%s %s owned=%v status=%v",
				c.Kind, c.Name, c.Phase, c.OwnerID == r.Resource.ID, c.Status != nil))
		}
		sort.Strings(children)
		return worker.Outcome{Status: js(map[string]any{"children": children,
			"spec": r.Resource.Spec != nil, "own_status": r.Resource.Status != nil})}, nil
	}
	return worker.Outcome{}, fmt.Errorf("unexpected stage %s", r.Stage)
}

// A worker gets the parts of a resource its reaction's manifest reads, and
// all of them when the reaction declares no reads; a rollup gets its
// children's status only when it reads childStatus. The children arrive
// through the Go SDK's columns (it asks for them), whole.
func TestRuntime_AReactionGetsThePartsItReads(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	for _, m := range []string{leanKind, fullKind, specRollupKind, childStatusRollupKind} {
		applyManifest(t, p.Store, m)
	}
	var providers []worker.Provider
	for _, k := range []string{"lean", "full", "specroll", "statusroll"} {
		providers = append(providers, apptest.NewProvider(k, sentParts))
	}
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, providers...)
	applyResource(t, p.Store, "specroll", "a", `{"x":1}`)
	applyResource(t, p.Store, "statusroll", "b", `{"x":2}`)

	a := apptest.WaitPhase(t, p.Store, "specroll", "a", resource.PhaseReady, 60*time.Second)
	b := apptest.WaitPhase(t, p.Store, "statusroll", "b", resource.PhaseReady, 60*time.Second)
	require.Equal(t, map[string]any{"spec": true, "own_status": false, "children": []any{
		"full/a-full Ready owned=true status=false", "lean/a-lean Ready owned=true status=false",
	}}, status(t, a), "reads [spec]: its spec, not its own status (compose wrote one), no child status")
	require.Equal(t, map[string]any{"spec": false, "own_status": false, "children": []any{
		"full/b-full Ready owned=true status=true", "lean/b-lean Ready owned=true status=true",
	}}, status(t, b), "reads [childStatus]: every child's status, neither its spec nor its own status")

	lean := apptest.WaitPhase(t, p.Store, "lean", "a-lean", resource.PhaseReady, 10*time.Second)
	full := apptest.WaitPhase(t, p.Store, "full", "a-full", resource.PhaseReady, 10*time.Second)
	require.Equal(t, map[string]any{"spec": true, "labels": nil}, status(t, lean), "reads [spec]: no labels")
	require.Equal(t, map[string]any{"spec": true, "labels": map[string]any{"team": "t1"}}, status(t, full),
		"no reads declared: labels too")
}
