package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/internal/plantest"
)

func TestApplyProviderConfig_Outcomes(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	in := ProviderConfigInput{Kind: "vpc", Name: "vpc-default", IsDefault: true, Spec: json.RawMessage(`{"region": "eu-west-1"}`)}
	steps := []struct {
		reason string
		edit   func()
		want   ApplyOutcome
	}{
		{"a new config is created", func() {}, Created},
		{"the same config again writes nothing", func() {}, Unchanged},
		{"an equal spec written differently is no change", func() { in.Spec = json.RawMessage(`{ "region":"eu-west-1" }`) }, Unchanged},
		{"a spec change", func() { in.Spec = json.RawMessage(`{"region": "us-east-1"}`) }, Configured},
		{"a data change", func() { in.Data = json.RawMessage(`{"bundle": [1, 2]}`) }, Configured},
		{"demoting the default", func() { in.IsDefault = false }, Configured},
		{"unchanged again", func() {}, Unchanged},
	}
	var firstID string
	for _, st := range steps {
		st.edit()
		pc, outcome, err := e.store.ApplyProviderConfig(ctx, in)
		require.NoError(t, err, st.reason)
		require.Equal(t, st.want, outcome, st.reason)
		if firstID == "" {
			firstID = pc.ID.String()
		}
		require.Equal(t, firstID, pc.ID.String())
		require.Equal(t, in.IsDefault, pc.IsDefault)
	}
	got, err := e.store.GetProviderConfig(ctx, "vpc", "vpc-default")
	require.NoError(t, err)
	require.JSONEq(t, `{"region": "us-east-1"}`, string(got.Spec))
	require.JSONEq(t, `{"bundle": [1, 2]}`, string(got.Data))
	require.Nil(t, got.OwnerID)

	_, err = e.store.GetProviderConfig(ctx, "vpc", "nope")
	require.ErrorIs(t, err, ErrNotFound)
}

func TestApplyProviderConfig_OneDefaultPerKind(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "vpc", Name: "first", IsDefault: true})
	require.NoError(t, err)
	_, _, err = e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "noop", Name: "noop-default", IsDefault: true})
	require.NoError(t, err, "each kind has its own default")
	_, _, err = e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "vpc", Name: "second"})
	require.NoError(t, err, "any number of non-defaults")

	before := e.tableCounts(t)
	for _, in := range []ProviderConfigInput{
		{Kind: "vpc", Name: "third", IsDefault: true},  // a new second default
		{Kind: "vpc", Name: "second", IsDefault: true}, // promoting a second default
	} {
		_, _, err = e.store.ApplyProviderConfig(ctx, in)
		require.ErrorIs(t, err, ErrConflict)
		require.Contains(t, err.Error(), `"first"`, "the error names the existing default")
	}
	if diff := cmp.Diff(before, e.tableCounts(t)); diff != "" {
		t.Errorf("rejected applies wrote rows (-before +after):\n%s", diff)
	}
	second, err := e.store.GetProviderConfig(ctx, "vpc", "second")
	require.NoError(t, err)
	require.False(t, second.IsDefault)

	_, _, err = e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "vpc", Name: "first", IsDefault: false})
	require.NoError(t, err)
	_, _, err = e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "vpc", Name: "second", IsDefault: true})
	require.NoError(t, err, "after demoting the default another may take its place")
}

func TestApplyProviderConfig_RejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	cases := map[string]struct {
		reason string
		in     ProviderConfigInput
		field  string
		rule   string
	}{
		"UnknownKind":    {"the kind must be declared", ProviderConfigInput{Kind: "nope", Name: "x"}, "kind", "unknown_kind"},
		"SchemaType":     {"the spec follows config_schema", ProviderConfigInput{Kind: "vpc", Name: "x", Spec: json.RawMessage(`{"region": 1}`)}, "spec/region", "type"},
		"SchemaExtra":    {"config_schema allows no other field", ProviderConfigInput{Kind: "vpc", Name: "x", Spec: json.RawMessage(`{"zone": "a"}`)}, "spec/zone", "additionalProperties"},
		"ReactorSchema":  {"a reactor kind's config_schema applies too", ProviderConfigInput{Kind: "statussink", Name: "x", Spec: json.RawMessage(`{"endpoint": 5}`)}, "spec/endpoint", "type"},
		"SpecNotObject":  {"a spec is an object", ProviderConfigInput{Kind: "noop", Name: "x", Spec: json.RawMessage(`"s"`)}, "spec", "type"},
		"DataNotJSON":    {"data is JSON", ProviderConfigInput{Kind: "noop", Name: "x", Data: json.RawMessage(`{`)}, "data", "malformed"},
		"BadName":        {"names are DNS-like", ProviderConfigInput{Kind: "noop", Name: "Not OK"}, "name", "name_invalid"},
		"NulInSpecValue": {"Postgres cannot store \\u0000", ProviderConfigInput{Kind: "noop", Name: "x", Spec: json.RawMessage(`{"a": "\u0000"}`)}, "spec", "malformed"},
	}
	before := e.tableCounts(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.store.ApplyProviderConfig(ctx, tc.in)
			requireInvalid(t, err, tc.field, tc.rule)
		})
	}
	if diff := cmp.Diff(before, e.tableCounts(t)); diff != "" {
		t.Errorf("rejected applies wrote rows (-before +after):\n%s", diff)
	}
}

func TestProviderConfig_ComposerOwnedCannotBeEditedOrDeletedByHand(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	root := e.noop(t, "root", nil)
	pc, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "vpc", Name: "composed", Spec: json.RawMessage(`{"region": "a"}`)})
	require.NoError(t, err)
	// Stands in for the compose application stamping its owner.
	_, err = e.pool.Exec(ctx, `UPDATE providerconfigs SET owner_id = $1 WHERE id = $2`, root.ID, pc.ID)
	require.NoError(t, err)

	err = e.store.DeleteProviderConfig(ctx, "vpc", "composed")
	require.ErrorIs(t, err, ErrConflict)
	require.Contains(t, err.Error(), root.ID.String())
	_, _, err = e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "vpc", Name: "composed", Spec: json.RawMessage(`{"region": "b"}`)})
	require.ErrorIs(t, err, ErrConflict)

	got, err := e.store.GetProviderConfig(ctx, "vpc", "composed")
	require.NoError(t, err)
	require.JSONEq(t, `{"region": "a"}`, string(got.Spec))
	require.Equal(t, &root.ID, got.OwnerID)
}

func TestDeleteProviderConfig(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "noop", Name: "gone"})
	require.NoError(t, err)
	require.NoError(t, e.store.DeleteProviderConfig(ctx, "noop", "gone"))
	_, err = e.store.GetProviderConfig(ctx, "noop", "gone")
	require.ErrorIs(t, err, ErrNotFound)
	err = e.store.DeleteProviderConfig(ctx, "noop", "gone")
	require.ErrorIs(t, err, ErrNotFound)
	require.Contains(t, err.Error(), "noop/gone")
}

func TestListProviderConfigs_FiltersAndPages(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	var all []string
	for i := range 7 {
		name := fmt.Sprintf("vpc-%d", i)
		_, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "vpc", Name: name, IsDefault: i == 3})
		require.NoError(t, err)
		all = append([]string{"vpc/" + name}, all...)
	}
	_, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "noop", Name: "noop-0", IsDefault: true})
	require.NoError(t, err)
	all = append([]string{"noop/noop-0"}, all...)

	listAll := func(opts ProviderConfigListOptions) []string {
		var out []string
		for {
			page, err := e.store.ListProviderConfigs(ctx, opts)
			require.NoError(t, err)
			for _, pc := range page.Items {
				out = append(out, pc.Kind+"/"+pc.Name)
			}
			if page.NextCursor == "" {
				return out
			}
			opts.After = page.NextCursor
		}
	}
	cases := map[string]struct {
		reason string
		opts   ProviderConfigListOptions
		want   []string
	}{
		"All":      {"every config, newest first", ProviderConfigListOptions{}, all},
		"AllPaged": {"pages of two", ProviderConfigListOptions{Limit: 2}, all},
		"Kind":     {"one kind", ProviderConfigListOptions{Kind: "vpc", Limit: 3}, all[1:]},
		"Name":     {"one name", ProviderConfigListOptions{Name: "vpc-5"}, []string{"vpc/vpc-5"}},
		"Defaults": {"only defaults", ProviderConfigListOptions{IsDefault: ptr(true)}, []string{"noop/noop-0", "vpc/vpc-3"}},
		"NonDefault": {"only non-defaults of a kind", ProviderConfigListOptions{Kind: "vpc", IsDefault: ptr(false), Limit: 4},
			[]string{"vpc/vpc-6", "vpc/vpc-5", "vpc/vpc-4", "vpc/vpc-2", "vpc/vpc-1", "vpc/vpc-0"}},
		"None": {"nothing matches", ProviderConfigListOptions{Kind: "statussink"}, nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, listAll(tc.opts)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tc.reason, diff)
			}
		})
	}
	_, err = e.store.ListProviderConfigs(ctx, ProviderConfigListOptions{After: "nope!"})
	requireInvalid(t, err, "after", "cursor_invalid")
}

func TestDeleteProviderConfig_RefusedWhileAResourceNamesIt(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "noop", Name: "acct"})
	require.NoError(t, err)
	for _, n := range []string{"d", "c", "b", "a"} {
		e.apply(t, ApplyResourceInput{Kind: "noop", Name: n, Spec: json.RawMessage(`{}`), ProviderConfigRef: "acct"})
	}

	// Deleted under them, they would run (and be torn down) with the kind's
	// default config, silently.
	err = e.store.DeleteProviderConfig(ctx, "noop", "acct")
	require.ErrorIs(t, err, ErrConflict)
	require.ErrorContains(t, err, "providerconfig noop/acct is named by 4 resource(s) (noop/a, noop/b, noop/c, …)")
	_, err = e.store.GetProviderConfig(ctx, "noop", "acct")
	require.NoError(t, err, "the refused delete wrote nothing")

	// Once no resource names it, it goes.
	for _, n := range []string{"a", "b", "c"} {
		e.apply(t, ApplyResourceInput{Kind: "noop", Name: n, Spec: json.RawMessage(`{}`)})
	}
	err = e.store.DeleteProviderConfig(ctx, "noop", "acct")
	require.ErrorContains(t, err, "is named by 1 resource(s) (noop/d)")
	e.apply(t, ApplyResourceInput{Kind: "noop", Name: "d", Spec: json.RawMessage(`{}`)})
	require.NoError(t, e.store.DeleteProviderConfig(ctx, "noop", "acct"))
}

// The refusal's probe reaches the resources that name the config by the
// config-ref index, at 10k rows analyzed and at 1M-row statistics: walking
// every resource of the kind is a scan at every delete.
func TestPlans_DeleteProviderConfigProbesTheConfigRefIndex(t *testing.T) {
	t.Parallel()
	for _, stats := range []string{"analyzed", "1M"} {
		t.Run(stats, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := context.Background()
			require.NoError(t, applyFixtureKinds(ctx, e.store))
			require.NoError(t, loadFixture(ctx, e.pool, 0, 10000))
			_, err := e.pool.Exec(ctx, `ANALYZE`)
			require.NoError(t, err)
			if stats == "1M" {
				plantest.Inflate(t, e.pool, 100, "resources")
			}
			_, _, err = e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "subnet", Name: "acct"})
			require.NoError(t, err)
			rec := &plantest.Recorder{}
			s := New(plantest.Pool(t, e.pool.Config(), rec), nil)
			require.NoError(t, s.DeleteProviderConfig(ctx, "subnet", "acct"))
			spec := plantest.Spec{Hot: []string{"resources"},
				Rules: []plantest.Rule{{Match: "r.provider_config_ref = $2", Uses: []string{"idx_resources_config_ref"}}}}
			plantest.Check(t, rec.Take(t), spec)
		})
	}
}
