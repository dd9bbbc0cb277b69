package store

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

// eventReasons lists a resource's event reasons, oldest first.
func (e env) eventReasons(t *testing.T, id uuid.UUID) []string {
	t.Helper()
	page, err := e.store.ListEvents(context.Background(), id, 500, "")
	require.NoError(t, err)
	var out []string
	for i := len(page.Items) - 1; i >= 0; i-- {
		out = append(out, page.Items[i].Reason)
	}
	return out
}

func TestApplyResource_OutcomesGenerationsAndEvents(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	in := ApplyResourceInput{Kind: "vpc", Name: "net-a", Spec: json.RawMessage(`{"cidr": "10.0.0.0/16"}`)}
	type result struct {
		Outcome    ApplyOutcome
		Generation int64
		Labels     map[string]string
		Events     []string
	}
	var created resource.Resource
	steps := []struct {
		reason string
		edit   func()
		want   result
	}{
		{"a new resource is created at generation 1 with a Created event", func() {},
			result{Created, 1, map[string]string{}, []string{"Created"}}},
		{"the same input writes nothing", func() {},
			result{Unchanged, 1, map[string]string{}, []string{"Created"}}},
		{"a spec equal as JSON (spacing, key order) is no change",
			func() { in.Spec = json.RawMessage(`{ "cidr":"10.0.0.0/16" }`) },
			result{Unchanged, 1, map[string]string{}, []string{"Created"}}},
		{"a labels-only change bumps no generation",
			func() { in.Labels = map[string]string{"team": "t1", "example.com/tier": "gold"} },
			result{Configured, 1, map[string]string{"team": "t1", "example.com/tier": "gold"}, []string{"Created", "LabelsUpdated"}}},
		{"a spec change bumps the generation",
			func() { in.Spec = json.RawMessage(`{"cidr": "10.1.0.0/16", "tags": ["a"]}`) },
			result{Configured, 2, map[string]string{"team": "t1", "example.com/tier": "gold"}, []string{"Created", "LabelsUpdated", "SpecUpdated"}}},
		{"nil labels on apply mean no labels (an apply replaces)",
			func() { in.Labels = nil },
			result{Configured, 2, map[string]string{}, []string{"Created", "LabelsUpdated", "SpecUpdated", "LabelsUpdated"}}},
	}
	for _, st := range steps {
		st.edit()
		r, outcome, err := e.store.ApplyResource(ctx, in)
		require.NoError(t, err, st.reason)
		if created.ID == uuid.Nil {
			created = r
		}
		require.Equal(t, created.ID, r.ID)
		got := result{outcome, r.Generation, r.Labels, e.eventReasons(t, r.ID)}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", st.reason, diff)
		}
	}
	r, err := e.store.GetResource(ctx, "vpc", "net-a")
	require.NoError(t, err)
	require.Equal(t, created.CreatedAt, r.CreatedAt, "created_at never changes: it is the list order key")
	require.Equal(t, "v1", r.Version)
}

func TestApplyResource_ShardIsShardOfID(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	r := e.noop(t, "sharded", nil)
	var want int
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT shard_of($1)`, r.ID).Scan(&want))
	require.Equal(t, want, r.ShardID)
}

// TestApplyResource_StoresAnEscapedBackslashBeforeU0000: "C:\\u0000" is
// a backslash, then the text u0000 — no NUL, and jsonb stores it (the
// check once looked for the text \u0000 anywhere and refused it).
func TestApplyResource_StoresAnEscapedBackslashBeforeU0000(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	r := e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "path", Spec: json.RawMessage(`{"cidr": "10.0.0.0/8", "tags": ["C:\\u0000"]}`)})
	require.JSONEq(t, `{"cidr": "10.0.0.0/8", "tags": ["C:\\u0000"]}`, string(r.Spec))
}

func TestApplyResource_RejectsBadInputAndWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "vpc", Name: "vpc-default", IsDefault: true})
	require.NoError(t, err)
	_, _, err = e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "noop", Name: "noop-custom"})
	require.NoError(t, err)
	existing := e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "existing", Spec: json.RawMessage(`{"cidr": "10.0.0.0/8"}`)})

	good := func(edit func(*ApplyResourceInput)) ApplyResourceInput {
		in := ApplyResourceInput{Kind: "vpc", Name: "fresh", Spec: json.RawMessage(`{"cidr": "10.0.0.0/16"}`)}
		edit(&in)
		return in
	}
	cases := map[string]struct {
		reason string
		in     ApplyResourceInput
		field  string
		rule   string
	}{
		"UnknownKind": {"a kind with no manifest", good(func(in *ApplyResourceInput) { in.Kind = "nope" }),
			"kind", "unknown_kind"},
		"ReactorKind": {"a reactor kind owns no resources", good(func(in *ApplyResourceInput) { in.Kind = "statussink" }),
			"kind", "reactor_kind"},
		"UnknownVersion": {"a version the kind does not have", good(func(in *ApplyResourceInput) { in.Version = "v2" }),
			"version", "unknown_version"},
		"MissingRequired": {"the schema requires cidr",
			good(func(in *ApplyResourceInput) { in.Spec = json.RawMessage(`{"tags": []}`) }), "spec/cidr", "required"},
		"WrongType": {"cidr must be a string",
			good(func(in *ApplyResourceInput) { in.Spec = json.RawMessage(`{"cidr": 10}`) }), "spec/cidr", "type"},
		"Pattern": {"cidr must match its pattern",
			good(func(in *ApplyResourceInput) { in.Spec = json.RawMessage(`{"cidr": "ten"}`) }), "spec/cidr", "pattern"},
		"NestedType": {"array items must be strings",
			good(func(in *ApplyResourceInput) { in.Spec = json.RawMessage(`{"cidr": "10.0.0.0/8", "tags": [1]}`) }),
			"spec/tags/0", "type"},
		"AdditionalProperty": {"the schema allows no other field",
			good(func(in *ApplyResourceInput) { in.Spec = json.RawMessage(`{"cidr": "10.0.0.0/8", "extra": 1}`) }),
			"spec/extra", "additionalProperties"},
		"SpecNotObject": {"a spec is an object",
			good(func(in *ApplyResourceInput) { in.Spec = json.RawMessage(`[1]`) }), "spec", "type"},
		"SpecNotJSON": {"a spec is JSON",
			good(func(in *ApplyResourceInput) { in.Spec = json.RawMessage(`{"cidr":`) }), "spec", "malformed"},
		"SpecLoneSurrogate": {"jsonb stores no escaped surrogate that is not half of a pair",
			good(func(in *ApplyResourceInput) { in.Spec = json.RawMessage(`{"cidr": "10.0.0.0/16", "tags": ["\ud800"]}`) }), "spec", "malformed"},
		"SpecNotUTF8": {"jsonb stores only UTF-8",
			good(func(in *ApplyResourceInput) {
				in.Spec = json.RawMessage("{\"cidr\": \"10.0.0.0/16\", \"tags\": [\"\xff\"]}")
			}), "spec", "malformed"},
		"BadName": {"names are lowercase DNS-like",
			good(func(in *ApplyResourceInput) { in.Name = "Bad_Name" }), "name", "name_invalid"},
		"EmptyName": {"a name is required",
			good(func(in *ApplyResourceInput) { in.Name = "" }), "name", "name_invalid"},
		"BadLabelKey": {"label keys follow the Kubernetes syntax",
			good(func(in *ApplyResourceInput) { in.Labels = map[string]string{"bad key": "x"} }), "labels", "label_key_invalid"},
		"BadLabelPrefix": {"a label prefix is a DNS subdomain",
			good(func(in *ApplyResourceInput) { in.Labels = map[string]string{"Example.COM/x": "y"} }), "labels", "label_key_invalid"},
		"LongLabelValue": {"label values are at most 63 characters",
			good(func(in *ApplyResourceInput) {
				in.Labels = map[string]string{"team": "a123456789012345678901234567890123456789012345678901234567890123"}
			}), "labels", "label_value_invalid"},
		"BadLabelValue": {"label values are name-like",
			good(func(in *ApplyResourceInput) { in.Labels = map[string]string{"team": "-x"} }), "labels", "label_value_invalid"},
		"UnknownConfigRef": {"the ref must name an existing config",
			good(func(in *ApplyResourceInput) { in.ProviderConfigRef = "nope" }), "providerConfigRef", "not_found"},
		"DefaultConfigRef": {"the ref must name a non-default config",
			good(func(in *ApplyResourceInput) { in.ProviderConfigRef = "vpc-default" }), "providerConfigRef", "default_config"},
		"OtherKindsConfigRef": {"the ref must name a config of the resource's kind",
			good(func(in *ApplyResourceInput) { in.ProviderConfigRef = "noop-custom" }), "providerConfigRef", "not_found"},
		"BadUpdate": {"an update that breaks the schema leaves the row as it was",
			good(func(in *ApplyResourceInput) { in.Name = "existing"; in.Spec = json.RawMessage(`{"cidr": 1}`) }),
			"spec/cidr", "type"},
	}
	before := e.tableCounts(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.store.ApplyResource(ctx, tc.in)
			requireInvalid(t, err, tc.field, tc.rule)
		})
	}
	if diff := cmp.Diff(before, e.tableCounts(t)); diff != "" {
		t.Errorf("rejected applies wrote rows (-before +after):\n%s", diff)
	}
	after, err := e.store.GetResource(ctx, "vpc", "existing")
	require.NoError(t, err)
	require.Equal(t, existing, after)
}

func TestApplyResource_Conflicts(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	for _, raw := range []string{
		`{"kind":"multi","version":"v1","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`,
		`{"kind":"multi","version":"v2","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`,
	} {
		_, _, err := e.store.ApplyManifest(ctx, []byte(raw))
		require.NoError(t, err)
	}
	_, _, err := e.store.ApplyResource(ctx, ApplyResourceInput{Kind: "multi", Name: "m"})
	requireInvalid(t, err, "version", "version_required")

	e.apply(t, ApplyResourceInput{Kind: "multi", Name: "m", Version: "v1"})
	again, outcome, err := e.store.ApplyResource(ctx, ApplyResourceInput{Kind: "multi", Name: "m"})
	require.NoError(t, err, "an existing resource keeps its version when none is named")
	require.Equal(t, Unchanged, outcome)
	require.Equal(t, "v1", again.Version)

	doomed := e.noop(t, "doomed", nil)
	e.setScalars(t, doomed.ID, scalars{generation: 1, healthOK: true, deleting: true})

	before := e.tableCounts(t)
	cases := map[string]struct {
		reason string
		in     ApplyResourceInput
	}{
		"BeingDeleted": {"a resource being deleted takes no apply",
			ApplyResourceInput{Kind: "noop", Name: doomed.Name, Spec: json.RawMessage(`{"n": 2}`)}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.store.ApplyResource(ctx, tc.in)
			require.ErrorIs(t, err, ErrConflict, tc.reason)
			require.Contains(t, err.Error(), tc.in.Name, "the message names the resource")
		})
	}
	if diff := cmp.Diff(before, e.tableCounts(t)); diff != "" {
		t.Errorf("conflicting applies wrote rows (-before +after):\n%s", diff)
	}
}

func TestApplyResource_ProviderConfigRefChangeBumpsGeneration(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "noop", Name: "custom", Spec: json.RawMessage(`{"a": 1}`)})
	require.NoError(t, err)
	in := ApplyResourceInput{Kind: "noop", Name: "r", Spec: json.RawMessage(`{}`)}
	r := e.apply(t, in)
	require.Equal(t, int64(1), r.Generation)
	require.Equal(t, "", r.ProviderConfigRef)

	in.ProviderConfigRef = "custom"
	r = e.apply(t, in)
	require.Equal(t, int64(2), r.Generation, "attaching a config changes the effective config: reconcile again")
	require.Equal(t, "custom", r.ProviderConfigRef)

	_, outcome, err := e.store.ApplyResource(ctx, in)
	require.NoError(t, err)
	require.Equal(t, Unchanged, outcome)

	in.ProviderConfigRef = ""
	r = e.apply(t, in)
	require.Equal(t, int64(3), r.Generation, "detaching bumps too")
}

func TestApplyResource_ConcurrentCreatesOfOneNameMakeOneRow(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	const n = 8
	var wg sync.WaitGroup
	outcomes := make([]ApplyOutcome, n)
	ids := make([]uuid.UUID, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, o, err := e.store.ApplyResource(ctx, ApplyResourceInput{Kind: "noop", Name: "racy", Spec: json.RawMessage(`{"n": 1}`)})
			outcomes[i], ids[i], errs[i] = o, r.ID, err
		}()
	}
	wg.Wait()
	created := 0
	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, ids[0], ids[i])
		if outcomes[i] == Created {
			created++
		} else {
			require.Equal(t, Unchanged, outcomes[i])
		}
	}
	require.Equal(t, 1, created)
	require.Equal(t, []string{"Created"}, e.eventReasons(t, ids[0]))
}

func TestGetResource_ByNameIDAndBatch(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	a := e.noop(t, "a", map[string]string{"x": "1"})
	b := e.noop(t, "b", nil)

	got, err := e.store.GetResource(ctx, "noop", "a")
	require.NoError(t, err)
	require.Equal(t, a, got)
	got, err = e.store.GetResourceByID(ctx, b.ID)
	require.NoError(t, err)
	require.Equal(t, b, got)

	_, err = e.store.GetResource(ctx, "noop", "zzz")
	require.ErrorIs(t, err, ErrNotFound)
	require.Contains(t, err.Error(), "noop/zzz")
	_, err = e.store.GetResourceByID(ctx, uuid.New())
	require.ErrorIs(t, err, ErrNotFound)

	missing := uuid.New()
	batch, err := e.store.ResourcesByIDs(ctx, []uuid.UUID{a.ID, missing, b.ID})
	require.NoError(t, err)
	require.Equal(t, map[uuid.UUID]resource.Resource{a.ID: a, b.ID: b}, batch)
}

func TestGetResource_NonStringLabelValuesStayReadable(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	r := e.noop(t, "odd", map[string]string{"a": "b"})
	// Stands in for a composer that wrote a non-string label value.
	_, err := e.pool.Exec(context.Background(), `UPDATE resources SET labels = '{"a": "b", "n": 3, "t": true}' WHERE id = $1`, r.ID)
	require.NoError(t, err)
	got, err := e.store.GetResourceByID(context.Background(), r.ID)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "b", "n": "3", "t": "true"}, got.Labels)
}
