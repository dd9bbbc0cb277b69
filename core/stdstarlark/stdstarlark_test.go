package stdstarlark_test

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
	"github.com/converge-run/converge/core/stdstarlark"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	composerKind = `{"kind":"stack","spec_schema":{"type":"object"},
 "reactions":[{"name":"compose","trigger":"specChange","emits":["children","edges","status"]},
              {"name":"rollup","trigger":"childrenSettled","emits":["status","conditions"]}]}`
	netKind = `{"kind":"net","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`
	appKind = `{"kind":"app","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`
)

const program = `def compose(resource):
    n = resource["name"]
    net = {"kind": "net", "name": n + "-net", "spec": {"cidr": resource["spec"]["cidr"]}}
    app = {"kind": "app", "name": n + "-app", "spec": {"replicas": resource["spec"]["replicas"]}}
    return {"children": [net, app],
            "edges": [{"dependent": app["name"], "dependency": net["name"], "flows": {"/net_id": "/net_id"}}],
            "status": {"composed_by": "starlark"}}
`

// TestStdstarlark_ComposesAgainstAServer: the program's children converge
// under a real converge, ordered by its edge, the value flowing from the
// net's status into the app's spec, and the root rolls up Ready.
func TestStdstarlark_ComposesAgainstAServer(t *testing.T) {
	t.Parallel()
	s := apptest.Start(t, apptest.Options{})
	for _, m := range []string{composerKind, netKind, appKind} {
		s.ApplyManifest(m)
	}
	ctx := context.Background()
	data, _ := json.Marshal(map[string]string{stdstarlark.Entry: program})
	_, _, err := s.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "stack", Name: "default", IsDefault: true,
		Spec: json.RawMessage(`{"max_steps":100000}`), Data: data})
	require.NoError(t, err)
	net := apptest.NewProvider("net", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		return worker.Outcome{Status: json.RawMessage(fmt.Sprintf(`{"net_id":"net-%s"}`, r.Resource.Name))}, nil
	})
	app := apptest.NewProvider("app", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		var spec struct {
			NetID string `json:"net_id"`
		}
		if err := json.Unmarshal(r.Resource.Spec, &spec); err != nil || spec.NetID == "" {
			return worker.Outcome{}, fmt.Errorf("no net_id in %s", r.Resource.Spec)
		}
		return worker.Outcome{Status: json.RawMessage(`{"url":"https://` + spec.NetID + `.example"}`)}, nil
	})
	s.StartWorker(apptest.Worker{Providers: []worker.Provider{stdstarlark.New(manifest.KindVersion{Kind: "stack"}, s.Log), net, app}})
	_, _, err = s.Store.ApplyResource(ctx, store.ApplyResourceInput{Kind: "stack", Name: "web", Spec: json.RawMessage(`{"cidr":"10.1.0.0/16","replicas":3}`)})
	require.NoError(t, err)

	root, below := s.WaitSubtree("stack", "web", 90*time.Second, apptest.AllIn(resource.PhaseReady))
	require.Len(t, below, 2)
	a := s.WaitPhase("app", "web-app", resource.PhaseReady, time.Second)
	require.JSONEq(t, `{"replicas":3,"net_id":"net-web-net"}`, string(a.Spec), "the net's status flowed into the app's spec")
	require.JSONEq(t, `{"url":"https://net-web-net.example"}`, string(a.Status))
	var st map[string]any
	require.NoError(t, json.Unmarshal(root.Status, &st))
	require.EqualValues(t, 2, st["ready"], "the rollup counted the subtree: %s", root.Status)

	// A broken program fails the compose terminally, naming its line.
	bad, _ := json.Marshal(map[string]string{stdstarlark.Entry: "def compose(resource):\n    fail('no cidr')\n"})
	_, _, err = s.Store.ApplyProviderConfig(ctx, store.ProviderConfigInput{Kind: "stack", Name: "broken", Data: bad})
	require.NoError(t, err)
	_, _, err = s.Store.ApplyResource(ctx, store.ApplyResourceInput{Kind: "stack", Name: "bad", Spec: json.RawMessage(`{}`), ProviderConfigRef: "broken"})
	require.NoError(t, err)
	failed := s.WaitPhase("stack", "bad", resource.PhaseFailed, 60*time.Second)
	require.True(t, failed.FailureTerminal)
	conds, err := s.Store.Conditions(ctx, failed.ID)
	require.NoError(t, err)
	msgs := ""
	for _, c := range conds {
		msgs += c.Message + "\n"
	}
	require.Contains(t, msgs, "main.star:2")
	require.Contains(t, msgs, "no cidr")
}

// TestCompose_WithoutASpec: a compose whose request carries no spec (a
// reaction reading only labels, or a resource without one) sees an empty
// spec, as stdcel does, instead of failing.
func TestCompose_WithoutASpec(t *testing.T) {
	t.Parallel()
	p := stdstarlark.New(manifest.KindVersion{Kind: "pipe"}, zerolog.Nop())
	data, _ := json.Marshal(map[string]string{"main.star": "def compose(resource):\n" +
		"    return {'children': [], 'status': {'spec': resource['spec'], 'team': resource['labels']['team']}}\n"})
	for _, spec := range []json.RawMessage{nil, json.RawMessage(`null`)} {
		out, err := p.Work(context.Background(), worker.Request{Stage: worker.StageCompose, Reaction: "compose",
			Resource: worker.Resource{Kind: "pipe", Version: "v1", Name: "a", Labels: map[string]string{"team": "x"}, Spec: spec},
			Config:   worker.EffectiveConfig{Name: "default", Data: data}})
		require.NoError(t, err, "spec %q", spec)
		require.JSONEq(t, `{"phase":"composed","resources":0,"spec":{},"team":"x"}`, string(out.Status))
	}
}

// TestCompose_OwnerLabelIsNotOverridden: a child's labels may not replace
// the stdstarlark label naming its composite.
func TestCompose_OwnerLabelIsNotOverridden(t *testing.T) {
	t.Parallel()
	p := stdstarlark.New(manifest.KindVersion{Kind: "pipe"}, zerolog.Nop())
	run := func(label string) (worker.Outcome, error) {
		data, _ := json.Marshal(map[string]string{"main.star": "def compose(resource):\n" +
			"    return {'children': [{'kind': 'k', 'name': 'c', 'labels': {'stdstarlark': '" + label + "', 'x': 'y'}}]}\n"})
		return p.Work(context.Background(), worker.Request{Stage: worker.StageCompose, Reaction: "compose",
			Resource: worker.Resource{Kind: "pipe", Version: "v1", Name: "a"}, Config: worker.EffectiveConfig{Name: "default", Data: data}})
	}
	_, err := run("other")
	require.ErrorContains(t, err, `children[0].labels: "stdstarlark" is set by stdstarlark`)
	require.True(t, worker.IsTerminal(err))
	out, err := run("a")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"stdstarlark": "a", "x": "y"}, out.Children[0].Labels)
}

// TestCompose_PrintsAreBounded: a program printing in a loop has its first
// MaxPrintLines lines logged and the rest counted in one line; a line past
// MaxPrintBytes is dropped too. Every print was logged: 10,000 lines here,
// a line a step (each up to a megabyte) in general.
func TestCompose_PrintsAreBounded(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	p := stdstarlark.New(manifest.KindVersion{Kind: "pipe"}, zerolog.New(&logs))
	data, _ := json.Marshal(map[string]string{"main.star": "def compose(resource):\n" +
		"    print('x' * 100000)\n" +
		"    for i in range(10000):\n" +
		"        print('line', i)\n" +
		"    return {'children': []}\n"})
	_, err := p.Work(context.Background(), worker.Request{Stage: worker.StageCompose, Reaction: "compose",
		Resource: worker.Resource{Kind: "pipe", Version: "v1", Name: "a"}, Config: worker.EffectiveConfig{Name: "default", Data: data}})
	require.NoError(t, err)
	require.Equal(t, stdstarlark.MaxPrintLines, logs.Count(`"starlark_print":"line `))
	require.Equal(t, 0, logs.Count("xxxxx"), "a line past MaxPrintBytes is not logged")
	require.Equal(t, 1, logs.Count(`"dropped":9901`), logs.String()[max(0, len(logs.String())-500):])
}

// TestCompose_RefusesABadSpec: the spec's limits are checked, naming the
// field: a misspelt field and a negative timeout_ms were silently the
// defaults.
func TestCompose_RefusesABadSpec(t *testing.T) {
	t.Parallel()
	p := stdstarlark.New(manifest.KindVersion{Kind: "pipe"}, zerolog.Nop())
	data, _ := json.Marshal(map[string]string{"main.star": "def compose(resource):\n    return {'children': []}\n"})
	for spec, want := range map[string]string{
		`{"max_step":5}`:          `unknown field "max_step"`,
		`{"timeout_ms":-5}`:       "timeout_ms -5 is outside 0..30000",
		`{"timeout_ms":40000}`:    "timeout_ms 40000 is outside 0..30000",
		`{"max_steps":200000000}`: "max_steps 200000000 is above the cap of 100000000",
	} {
		_, err := p.Work(context.Background(), worker.Request{Stage: worker.StageCompose, Reaction: "compose",
			Resource: worker.Resource{Kind: "pipe", Version: "v1", Name: "a"},
			Config:   worker.EffectiveConfig{Name: "default", Spec: json.RawMessage(spec), Data: data}})
		require.ErrorContains(t, err, want, spec)
		require.True(t, worker.IsTerminal(err), spec)
	}
}

// TestCompose_SpecNumbersKeepTheirDigits: an int in the spec reaches the
// program with every digit, and a float stays a float. It went through a
// float64: 12345678901234567891 arrived as 12345678901234567000.
func TestCompose_SpecNumbersKeepTheirDigits(t *testing.T) {
	t.Parallel()
	p := stdstarlark.New(manifest.KindVersion{Kind: "pipe"}, zerolog.Nop())
	data, _ := json.Marshal(map[string]string{"main.star": "def compose(resource):\n" +
		"    s = resource['spec']\n" +
		"    return {'children': [], 'status': {'big': s['big'], 'next': s['big'] + 1, 'half': s['half'], 'type': type(s['big'])}}\n"})
	out, err := p.Work(context.Background(), worker.Request{Stage: worker.StageCompose, Reaction: "compose",
		Resource: worker.Resource{Kind: "pipe", Version: "v1", Name: "a", Spec: json.RawMessage(`{"big":12345678901234567891,"half":0.5}`)},
		Config:   worker.EffectiveConfig{Name: "default", Data: data}})
	require.NoError(t, err)
	require.JSONEq(t, `{"phase":"composed","resources":0,"big":12345678901234567891,"next":12345678901234567892,"half":0.5,"type":"int"}`,
		string(out.Status))
	require.Contains(t, string(out.Status), "12345678901234567891", "every digit")
}

// TestCompose_TheTaskDeadlineIsNamedAndTransient: a compose stopped by the
// task's deadline, before its own timeout_ms, says so and is transient;
// its own time limit stays terminal. It was reported as "the time limit of
// 20s is exceeded" after 300 ms, a terminal failure.
func TestCompose_TheTaskDeadlineIsNamedAndTransient(t *testing.T) {
	t.Parallel()
	p := stdstarlark.New(manifest.KindVersion{Kind: "pipe"}, zerolog.Nop())
	// Each iteration sorts 100,000 elements in a handful of steps, so the
	// step cap lies hours away on any machine and only a clock can end the
	// run (an empty loop met the cap before 300 ms on a fast CI host).
	data, _ := json.Marshal(map[string]string{"main.star": "def compose(resource):\n" +
		"    l = list(range(100000))\n" +
		"    for i in range(1 << 40):\n        sorted(l, reverse = True)\n    return {'children': []}\n"})
	run := func(ctx context.Context, spec string) error {
		_, err := p.Work(ctx, worker.Request{Stage: worker.StageCompose, Reaction: "compose",
			Resource: worker.Resource{Kind: "pipe", Version: "v1", Name: "a"},
			Config:   worker.EffectiveConfig{Name: "default", Spec: json.RawMessage(spec), Data: data}})
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := run(ctx, `{"max_steps":100000000,"timeout_ms":20000}`)
	require.ErrorContains(t, err, "the task ended before the compose did")
	require.NotContains(t, err.Error(), "time limit")
	require.False(t, worker.IsTerminal(err), "a longer run may finish: %v", err)

	err = run(context.Background(), `{"max_steps":100000000,"timeout_ms":300}`)
	require.ErrorContains(t, err, "the time limit of 300ms is exceeded")
	require.True(t, worker.IsTerminal(err))
}
