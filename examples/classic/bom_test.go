package classic_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/classic"
)

func provider(t testing.TB, kind string) worker.Provider {
	t.Helper()
	for _, p := range classic.Providers(apptest.Logger(t)) {
		if p.Kind().Kind == kind {
			return p
		}
	}
	t.Fatalf("no provider for %s", kind)
	return nil
}

func TestBOMCompose_FansTeamsOutWithEdgesAndValueFlows(t *testing.T) {
	t.Parallel()
	out, err := provider(t, classic.KindBOM).Work(context.Background(), worker.Request{Stage: worker.StageCompose, Reaction: "compose",
		Resource: worker.Resource{Kind: "bom", Name: "b", Spec: json.RawMessage(`{"teams":2,"routes_per_team":1,"leaf_sim":{"latency_ms":0}}`)}})
	require.NoError(t, err)
	var names []string
	for _, c := range out.Children {
		names = append(names, c.Kind+"/"+c.Name)
		require.Equal(t, "b", c.Labels["bom"])
		require.JSONEq(t, `{"latency_ms":0}`, string(mustField(t, c.Spec, "sim")), "leaf_sim reaches every child")
	}
	require.Equal(t, []string{"account/b-t0-account", "vpc/b-t0-vpc", "route/b-t0-route-0",
		"account/b-t1-account", "vpc/b-t1-vpc", "route/b-t1-route-0"}, names)
	want := []worker.Edge{
		{Dependent: worker.Ref{Kind: "vpc", Name: "b-t0-vpc"}, Dependency: worker.Ref{Kind: "account", Name: "b-t0-account"},
			ValueFlows: []worker.ValueFlow{{SrcField: "/account_id", DepField: "/account_id"}}},
		{Dependent: worker.Ref{Kind: "route", Name: "b-t0-route-0"}, Dependency: worker.Ref{Kind: "vpc", Name: "b-t0-vpc"},
			ValueFlows: []worker.ValueFlow{{SrcField: "/vpc_id", DepField: "/vpc_id"}}},
		{Dependent: worker.Ref{Kind: "vpc", Name: "b-t1-vpc"}, Dependency: worker.Ref{Kind: "account", Name: "b-t1-account"},
			ValueFlows: []worker.ValueFlow{{SrcField: "/account_id", DepField: "/account_id"}}},
		{Dependent: worker.Ref{Kind: "route", Name: "b-t1-route-0"}, Dependency: worker.Ref{Kind: "vpc", Name: "b-t1-vpc"},
			ValueFlows: []worker.ValueFlow{{SrcField: "/vpc_id", DepField: "/vpc_id"}}},
	}
	if diff := cmp.Diff(want, out.Edges); diff != "" {
		t.Errorf("edges (-want +got):\n%s", diff)
	}
}

func mustField(t *testing.T, raw json.RawMessage, field string) json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m))
	return m[field]
}

func TestBOMRollup_AnyChildNotReadyDegradesTheBOM(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason   string
		phases   []string
		healthy  bool
		conds    int
		notReady any
	}{
		"all-ready":  {reason: "every child Ready: healthy, no condition", phases: []string{"Ready", "Ready"}, healthy: true},
		"one-failed": {reason: "a Failed child: unhealthy, ChildrenNotReady", phases: []string{"Ready", "Failed"}, conds: 1, notReady: []any{"route/c1 (Failed)"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			req := worker.Request{Stage: worker.StageRollup, Reaction: "rollup",
				Resource: worker.Resource{Kind: "bom", Name: "b", Spec: json.RawMessage(`{"teams":1}`)}}
			for i, ph := range tc.phases {
				req.Children = append(req.Children, worker.ChildSummary{Kind: "route", Name: fmt.Sprintf("c%d", i), Phase: ph})
			}
			out, err := provider(t, classic.KindBOM).Work(context.Background(), req)
			require.NoError(t, err)
			require.NotNil(t, out.HealthOK, tc.reason)
			require.Equal(t, tc.healthy, *out.HealthOK, tc.reason)
			require.Len(t, out.Conditions, tc.conds, tc.reason)
			var status map[string]any
			require.NoError(t, json.Unmarshal(out.Status, &status))
			require.Equal(t, tc.notReady, status["not_ready"], tc.reason)
			require.EqualValues(t, len(tc.phases), status["resources"], tc.reason)
		})
	}
}

func TestLeaf_SimulationFromConfigOverriddenBySpec(t *testing.T) {
	t.Parallel()
	acct := provider(t, classic.KindAccount)
	cases := map[string]struct {
		reason   string
		config   string
		spec     string
		errHas   string
		terminal bool
		minTook  time.Duration
	}{
		"instant":         {reason: "no knobs: an instant success", config: `{}`, spec: `{"team":"a"}`},
		"config-failure":  {reason: "failure_rate 1 in the config fails every run, transiently", config: `{"failure_rate":1}`, spec: `{"team":"a"}`, errHas: "simulated transient"},
		"spec-overrides":  {reason: "the spec's sim block wins over the config", config: `{"failure_rate":1}`, spec: `{"team":"a","sim":{"failure_rate":0}}`},
		"terminal":        {reason: "terminal_failure_rate fails terminally", config: `{}`, spec: `{"team":"a","sim":{"terminal_failure_rate":1}}`, errHas: "simulated terminal", terminal: true},
		"latency":         {reason: "latency_ms delays the result", config: `{"latency_ms":50}`, spec: `{"team":"a"}`, minTook: 50 * time.Millisecond},
		"latency-in-spec": {reason: "a spec latency replaces the config's", config: `{"latency_ms":60000}`, spec: `{"team":"a","sim":{"latency_ms":1}}`},
		"escaped-sim-key": {reason: "a sim block whose key is spelled with escapes still overrides", config: `{}`, spec: `{"team":"a","\u0073im":{"failure_rate":1}}`, errHas: "simulated transient"},
		"bad-config":      {reason: "a config the simulation cannot read fails every task, terminally", config: `{"failure_rate":"often"}`, spec: `{"team":"a"}`, errHas: `providerconfig "default"`, terminal: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for range 2 { // the second run reads the config from the cache
				started := time.Now()
				out, err := acct.Work(context.Background(), worker.Request{Stage: worker.StageWork, Reaction: "work",
					Resource: worker.Resource{Kind: "account", Name: "a1", Spec: json.RawMessage(tc.spec)},
					Config:   worker.EffectiveConfig{Name: "default", Spec: json.RawMessage(tc.config)}})
				require.GreaterOrEqual(t, time.Since(started), tc.minTook, tc.reason)
				require.Less(t, time.Since(started), 10*time.Second, tc.reason)
				if tc.errHas != "" {
					require.ErrorContains(t, err, tc.errHas, tc.reason)
					require.Equal(t, tc.terminal, worker.IsTerminal(err), tc.reason)
					continue
				}
				require.NoError(t, err, tc.reason)
				require.Regexp(t, `^"acct-[0-9a-f]{12}"$`, string(mustField(t, out.Status, "account_id")), tc.reason)
			}
		})
	}
}

// TestFixtures_AreValidDocuments checks every fixture decodes strictly and
// every manifest passes the legality lattice and compiles its schemas.
func TestFixtures_AreValidDocuments(t *testing.T) {
	t.Parallel()
	docs, err := classic.Documents(true)
	require.NoError(t, err)
	seen := map[apply.Type]int{}
	served := map[manifest.KindVersion]bool{}
	for _, d := range docs {
		seen[d.Type]++
		if d.Type == apply.TypeManifest {
			m, err := manifest.Parse(d.Raw)
			require.NoError(t, err, d.Path)
			served[m.KindVersion()] = true
		}
	}
	require.Equal(t, map[apply.Type]int{apply.TypeManifest: 8, apply.TypeProviderConfig: 5, apply.TypeReactorBinding: 2, apply.TypeResource: 2}, seen)
	for _, p := range classic.Providers(apptest.Logger(t)) {
		require.True(t, served[p.Kind()], "provider %s has a fixture manifest", p.Kind())
		delete(served, p.Kind())
	}
	require.Empty(t, served, "every manifest has a provider")
	// The documents decode strictly (a recording applier sees them all).
	rec := &recorder{}
	require.NoError(t, apply.All(context.Background(), rec, docs))
	require.Len(t, rec.got, len(docs))
}

type recorder struct{ got []string }

func (r *recorder) ApplyManifest(context.Context, json.RawMessage) error {
	r.got = append(r.got, "manifest")
	return nil
}
func (r *recorder) ApplyProviderConfig(_ context.Context, pc apply.ProviderConfig) error {
	r.got = append(r.got, "providerconfig/"+pc.Kind)
	return nil
}
func (r *recorder) ApplyReactorBinding(_ context.Context, b apply.ReactorBinding) error {
	r.got = append(r.got, "binding/"+b.Name)
	return nil
}
func (r *recorder) ApplyResource(_ context.Context, res apply.Resource) error {
	r.got = append(r.got, "resource/"+res.Kind+"/"+res.Name)
	return nil
}

func TestOptionsFromEnv_FakeDeleteDelay(t *testing.T) {
	t.Parallel()
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "FAKE_DELETE_DELAY" {
				return v
			}
			return ""
		}
	}
	o, err := classic.OptionsFromEnv(env(""))
	require.NoError(t, err)
	require.Equal(t, classic.DefaultDeleteDelay, o.DeleteDelay)
	o, err = classic.OptionsFromEnv(env("250ms"))
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, o.DeleteDelay)
	for _, bad := range []string{"5", "-1s", "soon"} {
		_, err := classic.OptionsFromEnv(env(bad))
		require.ErrorContains(t, err, "FAKE_DELETE_DELAY", bad)
	}
}

func TestClassicBOMCompose_UnitsWireRoutesToBothVPCAndTGW(t *testing.T) {
	t.Parallel()
	p := provider(t, classic.KindClassicBOM)
	out, err := p.Work(context.Background(), worker.Request{Stage: worker.StageCompose, Reaction: "compose",
		Resource: worker.Resource{Kind: classic.KindClassicBOM, Name: "c", Spec: json.RawMessage(`{"domains":["pay"],"teams":["red","blue"]}`)}})
	require.NoError(t, err)
	require.Len(t, out.Children, 2*classic.KindsPerUnit)
	var routeDeps []string
	for _, e := range out.Edges {
		if e.Dependent.Name == "c-pay-red-route" {
			routeDeps = append(routeDeps, e.Dependency.Kind+"/"+e.Dependency.Name+" "+e.ValueFlows[0].SrcField)
		}
	}
	require.Equal(t, []string{"vpc/c-pay-red-vpc /vpc_id", "tgw/c-pay-red-tgw /tgw_id"}, routeDeps)

	// a-b × c and a × b-c would both be unit "a-b-c": refused, terminally.
	_, err = p.Work(context.Background(), worker.Request{Stage: worker.StageCompose, Reaction: "compose",
		Resource: worker.Resource{Kind: classic.KindClassicBOM, Name: "c", Spec: json.RawMessage(`{"domains":["a-b","a"],"teams":["c","b-c"]}`)}})
	require.ErrorContains(t, err, `names unit "a-b-c" twice`)
	require.True(t, worker.IsTerminal(err))
}
