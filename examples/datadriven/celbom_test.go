package datadriven_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/examples/apply"
	"github.com/converge-run/converge/examples/datadriven"
)

func provider(t *testing.T, kind string) worker.Provider {
	t.Helper()
	for _, p := range datadriven.Providers(apptest.Logger(t)) {
		if p.Kind().Kind == kind {
			return p
		}
	}
	t.Fatalf("no provider for %s", kind)
	return nil
}

// fixtureConfig is the spec of a fixture providerconfig.
func fixtureConfig(t *testing.T, kind string) apply.ProviderConfig {
	t.Helper()
	docs, err := datadriven.Documents(true)
	require.NoError(t, err)
	for _, d := range docs {
		if d.Type != apply.TypeProviderConfig {
			continue
		}
		var pc apply.ProviderConfig
		require.NoError(t, json.Unmarshal(d.Raw, &pc))
		if pc.Kind == kind {
			return pc
		}
	}
	t.Fatalf("no providerconfig fixture for %s", kind)
	return apply.ProviderConfig{}
}

func compose(t *testing.T, kind, spec string, cfg apply.ProviderConfig) (worker.Outcome, error) {
	t.Helper()
	return provider(t, kind).Work(context.Background(), worker.Request{Stage: worker.StageCompose, Reaction: "compose",
		Resource: worker.Resource{Kind: kind, Name: "shop", Spec: json.RawMessage(spec)},
		Config:   worker.EffectiveConfig{Name: cfg.Name, Spec: cfg.Spec, Data: cfg.Data}})
}

func TestCELBOM_FixtureRulesFanOutTheDAG(t *testing.T) {
	t.Parallel()
	out, err := compose(t, datadriven.KindCELBOM, `{"teams":[{"name":"red","tier":"prod","image":"img:1"},{"name":"blue","tier":"dev","image":"img:2"},{"name":"green","tier":"dev"}]}`,
		fixtureConfig(t, datadriven.KindCELBOM))
	require.NoError(t, err)
	var names []string
	for _, c := range out.Children {
		names = append(names, c.Kind+"/"+c.Name)
	}
	require.Equal(t, []string{"fakevpc/shop-red-vpc", "fakedb/shop-red-db", "fakeapp/shop-red-app",
		"fakevpc/shop-blue-vpc", "fakeapp/shop-blue-app", "fakevpc/shop-green-vpc"}, names)
	require.JSONEq(t, `{"team":"red","engine":"postgres","size_gb":100}`, string(out.Children[1].Spec), "set computed size_gb")
	require.JSONEq(t, `{"team":"red","image":"img:1"}`, string(out.Children[2].Spec))
	require.Equal(t, []worker.Edge{
		{Dependent: worker.Ref{Kind: "fakeapp", Name: "shop-red-app"}, Dependency: worker.Ref{Kind: "fakevpc", Name: "shop-red-vpc"},
			ValueFlows: []worker.ValueFlow{{SrcField: "/vpc_id", DepField: "/vpc_id"}}},
		{Dependent: worker.Ref{Kind: "fakeapp", Name: "shop-red-app"}, Dependency: worker.Ref{Kind: "fakedb", Name: "shop-red-db"},
			ValueFlows: []worker.ValueFlow{{SrcField: "/db_endpoint", DepField: "/db_endpoint"}}},
		{Dependent: worker.Ref{Kind: "fakeapp", Name: "shop-blue-app"}, Dependency: worker.Ref{Kind: "fakevpc", Name: "shop-blue-vpc"},
			ValueFlows: []worker.ValueFlow{{SrcField: "/vpc_id", DepField: "/vpc_id"}}},
	}, out.Edges, "blue has no db, so its app's db edge is skipped")
}

func TestCELBOM_BadRulesFailTerminallyNamingTheRule(t *testing.T) {
	t.Parallel()
	cases := map[string]struct{ rules, spec, errHas string }{
		"syntax":         {`{"rules":[{"name":"a","kind":"fakevpc","when":"team.tier =="}]}`, `{"teams":[{"name":"x"}]}`, `rules[0] (a): when "team.tier ==": ERROR`},
		"not a bool":     {`{"rules":[{"name":"a","kind":"fakevpc","when":"'yes'"}]}`, `{"teams":[{"name":"x"}]}`, "is of type string, want bool"},
		"dyn not a bool": {`{"rules":[{"name":"a","kind":"fakevpc","when":"team.tier"}]}`, `{"teams":[{"name":"x","tier":"prod"}]}`, "want a bool"},
		"missing key":    {`{"rules":[{"name":"a","kind":"fakevpc","when":"team.tier == 'prod'"}]}`, `{"teams":[{"name":"x"}]}`, "no such key: tier"},
		"forward need":   {`{"rules":[{"name":"a","kind":"fakeapp","needs":[{"rule":"b"}]},{"name":"b","kind":"fakevpc"}]}`, `{"teams":[]}`, `needs "b", which is not an earlier rule`},
		"duplicate name": {`{"rules":[{"name":"a","kind":"fakevpc"},{"name":"a","kind":"fakevpc"}]}`, `{"teams":[]}`, "unique"},
		"bad set":        {`{"rules":[{"name":"a","kind":"fakevpc","set":{"cidr":"1 +"}}]}`, `{"teams":[]}`, "set.cidr"},
		"cost limit":     {`{"rules":[{"name":"a","kind":"fakevpc","when":"[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, a+b+c+d > 0))))"}]}`, `{"teams":[{"name":"x"}]}`, "cost limit"},
		"no rules":       {`null`, `{"teams":[]}`, "no rules"},
		"bad team name":  {`{"rules":[{"name":"a","kind":"fakevpc"}]}`, `{"teams":[{"name":"Not OK"}]}`, `spec.teams[0].name "Not OK"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := compose(t, datadriven.KindCELBOM, tc.spec, apply.ProviderConfig{Name: "default", Spec: json.RawMessage(tc.rules)})
			require.Error(t, err)
			require.True(t, worker.IsTerminal(err), "a bad rule is the author's to fix, not retried: %v", err)
			require.Contains(t, err.Error(), tc.errHas)
		})
	}
}

// TestFixtures_AreValidDocuments: every manifest passes the legality
// lattice, every provider has one, and every document decodes.
func TestFixtures_AreValidDocuments(t *testing.T) {
	t.Parallel()
	docs, err := datadriven.Documents(true)
	require.NoError(t, err)
	served := map[manifest.KindVersion]bool{}
	for _, d := range docs {
		if d.Type == apply.TypeManifest {
			m, err := manifest.Parse(d.Raw)
			require.NoError(t, err, d.Path)
			served[m.KindVersion()] = true
		}
	}
	for _, p := range datadriven.Providers(apptest.Logger(t)) {
		require.True(t, served[p.Kind()], "provider %s has a fixture manifest", p.Kind())
		delete(served, p.Kind())
	}
	require.Empty(t, served, "every manifest has a provider")
	// The sample celbom composes with the fixture rules, the sample
	// stdstarlark with the fixture program.
	for _, kind := range []string{datadriven.KindCELBOM, datadriven.KindStarlark} {
		for _, d := range docs {
			var r apply.Resource
			if d.Type == apply.TypeResource && json.Unmarshal(d.Raw, &r) == nil && r.Kind == kind {
				out, err := compose(t, kind, string(r.Spec), fixtureConfig(t, kind))
				require.NoError(t, err, kind)
				require.NotEmpty(t, out.Children, kind)
			}
		}
	}
}
