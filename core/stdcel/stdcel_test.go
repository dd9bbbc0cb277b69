package stdcel_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/stdcel"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	stackKind = `{"kind":"netstack","spec_schema":{"type":"object"},
 "reactions":[{"name":"compose","trigger":"specChange","emits":["children","edges","status"]},
              {"name":"rollup","trigger":"childrenSettled","emits":["status","conditions"]}]}`
	leafKind = `{"kind":"%s","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`
)

// graph: a vpc, a subnet in it (its vpc_id flows from the vpc's status),
// and an app on the subnet; the composite's status projects the children's.
const graph = `{"resources":[
  {"id":"app","kind":"app","spec":{"subnet_id":"${subnet.status.subnet_id}","image":"${schema.spec.image}"}},
  {"id":"subnet","kind":"subnet","name":"${vpc.name}-subnet","spec":{"vpc_id":"${vpc.status.vpc_id}","cidr":"${schema.spec.cidr}"}},
  {"id":"vpc","kind":"vpc","spec":{"cidr":"${schema.spec.cidr}"}}
 ],
 "status":{"vpc_id":"${vpc.status.vpc_id}","endpoint":"https://${app.status.host}","subnet_phase":"${subnet.phase}"}}`

// TestStdcel_ComposesAGraphAgainstAServer: a composite converges under a
// real converge with its children ordered by the inferred edges, values
// flowing vpc → subnet → app, and its status projected from theirs at
// rollup; a graph with a cycle fails the compose terminally, naming it.
func TestStdcel_ComposesAGraphAgainstAServer(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	s.ApplyManifest(stackKind)
	for _, k := range []string{"vpc", "subnet", "app"} {
		s.ApplyManifest(fmt.Sprintf(leafKind, k))
	}
	ctx := context.Background()
	_, _, err := s.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "netstack", Name: "default", IsDefault: true, Spec: json.RawMessage(graph)})
	require.NoError(t, err)
	leaf := func(kind string, status func(spec map[string]any) (map[string]any, error)) worker.Provider {
		return apptest.NewProvider(kind, func(_ context.Context, r worker.Request) (worker.Outcome, error) {
			var spec map[string]any
			if err := json.Unmarshal(r.Resource.Spec, &spec); err != nil {
				return worker.Outcome{}, worker.Terminal(err)
			}
			st, err := status(spec)
			if err != nil {
				return worker.Outcome{}, err
			}
			b, _ := json.Marshal(st)
			return worker.Outcome{Status: b}, nil
		})
	}
	need := func(spec map[string]any, field string) (string, error) {
		v, _ := spec[field].(string)
		if v == "" {
			return "", fmt.Errorf("%s not set yet in %v", field, spec)
		}
		return v, nil
	}
	vpc := leaf("vpc", func(map[string]any) (map[string]any, error) { return map[string]any{"vpc_id": "vpc-123"}, nil })
	subnet := leaf("subnet", func(spec map[string]any) (map[string]any, error) {
		id, err := need(spec, "vpc_id")
		return map[string]any{"subnet_id": id + "-sn1"}, err
	})
	app := leaf("app", func(spec map[string]any) (map[string]any, error) {
		id, err := need(spec, "subnet_id")
		return map[string]any{"host": "app." + id}, err
	})
	s.StartWorker(apptest.Worker{Providers: []worker.Provider{stdcel.New(manifest.KindVersion{Kind: "netstack"}, s.Log), vpc, subnet, app}})
	_, _, err = s.Store.ApplyResource(ctx, store.ApplyResourceInput{Kind: "netstack", Name: "web",
		Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","image":"nginx:1.27"}`)})
	require.NoError(t, err)

	_, below := s.WaitSubtree("netstack", "web", 90*time.Second, apptest.AllIn(resource.PhaseReady))
	require.Len(t, below, 3)
	sn := s.WaitPhase("subnet", "web-vpc-subnet", resource.PhaseReady, time.Second)
	require.JSONEq(t, `{"cidr":"10.0.0.0/16","vpc_id":"vpc-123"}`, string(sn.Spec), "vpc_id flowed from the vpc's status")
	a := s.WaitPhase("app", "web-app", resource.PhaseReady, time.Second)
	require.JSONEq(t, `{"image":"nginx:1.27","subnet_id":"vpc-123-sn1"}`, string(a.Spec))
	apptest.WaitFor(t, 30*time.Second, "the rollup projects the children's status", func() bool {
		r, err := s.Store.GetResource(ctx, "netstack", "web")
		if err != nil {
			return false
		}
		var st map[string]any
		_ = json.Unmarshal(r.Status, &st)
		return st["endpoint"] == "https://app.vpc-123-sn1" && st["vpc_id"] == "vpc-123" && st["subnet_phase"] == "Ready"
	})

	_, _, err = s.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "netstack", Name: "loop", Spec: json.RawMessage(
		`{"resources":[{"id":"a","kind":"vpc","spec":{"x":"${b.status.x}"}},{"id":"b","kind":"vpc","spec":{"y":"${a.status.y}"}}]}`)})
	require.NoError(t, err)
	_, _, err = s.Store.ApplyResource(ctx, store.ApplyResourceInput{Kind: "netstack", Name: "loopy", Spec: json.RawMessage(`{}`), ProviderConfigRef: "loop"})
	require.NoError(t, err)
	bad := s.WaitPhase("netstack", "loopy", resource.PhaseFailed, 60*time.Second)
	require.True(t, bad.FailureTerminal)
	conds, err := s.Store.Conditions(ctx, bad.ID)
	require.NoError(t, err)
	msgs := ""
	for _, c := range conds {
		msgs += c.Message + "\n"
	}
	require.Contains(t, msgs, "the resources form a cycle: a → b → a")
}

// TestRollup_StatusErrorsAreReportedNotUnresolved: a status expression
// whose inputs are missing is unresolved; one that fails otherwise (a type
// error, division by zero) is left out and named, with the CEL error, in
// the StatusProjection condition.
func TestRollup_StatusErrorsAreReportedNotUnresolved(t *testing.T) {
	t.Parallel()
	p := stdcel.New(manifest.KindVersion{Kind: "stack"}, zerolog.Nop())
	spec := json.RawMessage(`{"resources":[{"id":"vpc","kind":"vpc"}],"status":{"port":"${vpc.status.port + 'x'}",
		"ratio":"${int(vpc.status.port) / 0}", "zone":"${vpc.status.zone}", "ok":"${vpc.status.port}"}}`)
	out, err := p.Work(context.Background(), worker.Request{Stage: worker.StageRollup, Reaction: "rollup",
		Resource: worker.Resource{Kind: "stack", Version: "v1", Name: "web", Spec: json.RawMessage(`{}`)},
		Config:   worker.EffectiveConfig{Name: "default", Spec: spec},
		Children: []worker.ChildSummary{{Kind: "vpc", Name: "web-vpc", Phase: "Ready", HealthOK: true, Status: json.RawMessage(`{"port":80}`)}}})
	require.NoError(t, err)
	require.JSONEq(t, `{"phase":"rolled-up","resources":1,"ready":1,"ok":80,"unresolved":["zone"]}`, string(out.Status))
	require.Len(t, out.Conditions, 1)
	c := out.Conditions[0]
	require.Equal(t, stdcel.StatusCondition, c.Type)
	require.Equal(t, "False", c.Status)
	require.Contains(t, c.Message, "status.port: ${vpc.status.port + 'x'}: no such overload")
	require.Contains(t, c.Message, "status.ratio: ${int(vpc.status.port) / 0}: division by zero")
}

// TestWork_TheTaskEndingIsTransient: an evaluation the task's end
// interrupted fails transiently, naming why, at compose and at rollup. The
// compose failed terminally with CEL's "operation interrupted", for good,
// and the rollup wrote a status without the interrupted fields, reported
// as failing expressions.
func TestWork_TheTaskEndingIsTransient(t *testing.T) {
	t.Parallel()
	p := stdcel.New(manifest.KindVersion{Kind: "stack"}, zerolog.Nop())
	l, err := json.Marshal(map[string]any{"l": make([]int, 5000)})
	require.NoError(t, err)
	cfg := json.RawMessage(`{"resources":[{"id":"vpc","kind":"vpc","spec":{"l":"${schema.spec.l.map(x, x + 1.0)}"}}],
		"status":{"l":"${schema.spec.l.map(x, x + 1.0)}"}}`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, stage := range []worker.Stage{worker.StageCompose, worker.StageRollup} {
		_, err := p.Work(ctx, worker.Request{Stage: stage, Reaction: string(stage),
			Resource: worker.Resource{Kind: "stack", Version: "v1", Name: "web", Spec: l},
			Config:   worker.EffectiveConfig{Name: "default", Spec: cfg}})
		require.ErrorContains(t, err, "the task ended before the evaluation did", stage)
		require.False(t, worker.IsTerminal(err), "%s: %v", stage, err)
	}
	out, err := p.Work(context.Background(), worker.Request{Stage: worker.StageCompose, Reaction: "compose",
		Resource: worker.Resource{Kind: "stack", Version: "v1", Name: "web", Spec: l},
		Config:   worker.EffectiveConfig{Name: "default", Spec: cfg}})
	require.NoError(t, err, "with the time it needs, the same evaluation succeeds")
	require.Len(t, out.Children, 1)
}
