package store

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
)

func TestApplyManifest_OutcomeAndManifestGen(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	type result struct {
		Outcome     ApplyOutcome
		ManifestGen int64
		Version     string
		Description string
	}
	steps := []struct {
		reason string
		raw    string
		want   result
	}{
		{"a new kind is created at manifest_gen 1, version defaulted to v1", noopManifest,
			result{Created, 1, "v1", ""}},
		{"the same document again changes nothing", noopManifest,
			result{Unchanged, 1, "v1", ""}},
		{"whitespace and key order are not a change (jsonb equality)",
			`{"reactions":[{"emits":["status"],"trigger":"specChange","name":"work"}],   "kind":"noop"}`,
			result{Unchanged, 1, "v1", ""}},
		{"a changed document bumps manifest_gen",
			`{"kind":"noop","description":"now described","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`,
			result{Configured, 2, "v1", "now described"}},
		{"re-applying the changed document is unchanged",
			`{"kind":"noop","description":"now described","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`,
			result{Unchanged, 2, "v1", "now described"}},
	}
	for _, st := range steps {
		k, outcome, err := e.store.ApplyManifest(ctx, []byte(st.raw))
		require.NoError(t, err, st.reason)
		got := result{outcome, k.ManifestGen, k.Version, k.Manifest.Description}
		if diff := cmp.Diff(st.want, got); diff != "" {
			t.Fatalf("%s (-want +got):\n%s", st.reason, diff)
		}
	}
}

func TestApplyManifest_RawIsStoredAsAppliedWithoutDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k, _, err := e.store.ApplyManifest(context.Background(), []byte(noopManifest))
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(k.Raw, &doc))
	_, hasVersion := doc["version"]
	require.False(t, hasVersion, "the stored document gains no defaulted version: %s", k.Raw)
	require.Equal(t, "v1", k.Version)
	require.Equal(t, "v1", k.Manifest.Version)
}

func TestApplyManifest_UnchangedReapplySendsNoNotify(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	conn, err := e.pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "LISTEN kind_manifest_changed")
	require.NoError(t, err)

	wait := func() (string, bool) {
		wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		n, err := conn.Conn().WaitForNotification(wctx)
		if err != nil {
			return "", false
		}
		return n.Payload, true
	}
	_, _, err = e.store.ApplyManifest(ctx, []byte(noopManifest))
	require.NoError(t, err)
	payload, ok := wait()
	require.True(t, ok, "a create notifies")
	require.Equal(t, "noop/v1", payload)

	_, outcome, err := e.store.ApplyManifest(ctx, []byte(noopManifest))
	require.NoError(t, err)
	require.Equal(t, Unchanged, outcome)
	// The apply committed before we wait, so a notify would already be queued
	// on this connection; the short wait only bounds the check.
	_, ok = wait()
	require.False(t, ok, "an unchanged re-apply must not notify")
}

func TestApplyManifest_IllegalManifestIsRejectedAndNothingWritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	cases := map[string]struct {
		reason string
		raw    string
		field  string
		rule   string
	}{
		"NotJSON": {"not JSON at all", `{"kind":`, "manifest", manifest.RuleMalformed},
		"UnknownField": {"an unknown top-level field", `{"kind":"a","reactions":[],"colour":"red"}`,
			"manifest/colour", manifest.RuleUnknownField},
		"BadKind":    {"a kind name with capitals", `{"kind":"Vpc","reactions":[]}`, "manifest/kind", manifest.RuleKindInvalid},
		"NoReaction": {"no reactions", `{"kind":"a","reactions":[]}`, "manifest/reactions", manifest.RuleReactionsMissing},
		"ComposerWithoutStatus": {"a composer that emits no status",
			`{"kind":"a","reactions":[{"name":"c","trigger":"specChange","emits":["children"]}]}`,
			"manifest/reactions/0/emits", manifest.RuleComposerRequiresStatus},
		"OperationWithoutVerb": {"an operation reaction without a verb",
			`{"kind":"a","reactions":[{"name":"o","trigger":"operation","emits":["operationOutput"]}]}`,
			"manifest/reactions/0/verb", manifest.RuleOperationRequiresVerb},
		"ReactorWithStatus": {"a reactor that emits more than sideEffect",
			`{"kind":"a","reactions":[{"name":"r","trigger":"reactor","emits":["sideEffect","status"]}]}`,
			"manifest/reactions/0/emits", manifest.RuleReactorEmitsSideEffectOnly},
		"SchemaDoesNotCompile": {"a spec schema that is not a JSON Schema",
			`{"kind":"a","spec_schema":{"type":"strnig"},"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`,
			"manifest/spec_schema", manifest.RuleSchemaInvalid},
		"NegativePolicy": {"a negative cap",
			`{"kind":"a","max_inflight":-1,"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`,
			"manifest/max_inflight", manifest.RulePolicyInvalid},
	}
	before := e.tableCounts(t)
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.store.ApplyManifest(ctx, []byte(tc.raw))
			requireInvalid(t, err, tc.field, tc.rule)
		})
	}
	if diff := cmp.Diff(before, e.tableCounts(t)); diff != "" {
		t.Errorf("rejected manifests wrote rows (-before +after):\n%s", diff)
	}
}

func TestGetKind_VersionResolution(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, raw := range []string{
		noopManifest,
		`{"kind":"multi","version":"v1","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`,
		`{"kind":"multi","version":"v2beta1","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`,
	} {
		_, _, err := e.store.ApplyManifest(ctx, []byte(raw))
		require.NoError(t, err)
	}

	k, err := e.store.GetKind(ctx, "noop", "")
	require.NoError(t, err, "the only version of a kind needs no version")
	require.Equal(t, "v1", k.Version)

	k, err = e.store.GetKind(ctx, "multi", "v2beta1")
	require.NoError(t, err)
	require.Equal(t, "v2beta1", k.Version)

	_, err = e.store.GetKind(ctx, "multi", "")
	requireInvalid(t, err, "version", "version_required")

	_, err = e.store.GetKind(ctx, "nope", "")
	require.ErrorIs(t, err, ErrNotFound)
	_, err = e.store.GetKind(ctx, "noop", "v9")
	require.ErrorIs(t, err, ErrNotFound)

	all, err := e.store.ListKinds(ctx)
	require.NoError(t, err)
	var names []string
	for _, k := range all {
		names = append(names, k.Name+"/"+k.Version)
	}
	require.Equal(t, []string{"multi/v1", "multi/v2beta1", "noop/v1"}, names)
}

func TestKindConfig_SeedNeverClobbersAnOperatorEdit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	withCap := func(n int) string {
		return `{"kind":"capped","max_inflight":` + strconv.Itoa(n) + `,"task_deadline_secs":30,
			"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
	}
	cfg := func() KindConfig {
		k, err := e.store.GetKind(ctx, "capped", "v1")
		require.NoError(t, err)
		k.Config.UpdatedAt = time.Time{}
		return k.Config
	}

	_, _, err := e.store.ApplyManifest(ctx, []byte(withCap(5)))
	require.NoError(t, err)
	require.Equal(t, KindConfig{MaxInflight: 5, TaskDeadlineSecs: 30, MaxTransientAttempts: 20}, cfg(), "the first apply seeds the config")

	got, err := e.store.UpdateKindConfig(ctx, "capped", "v1", KindConfigPatch{MaxInflight: ptr(7), ResyncRecomposes: ptr(true)})
	require.NoError(t, err)
	got.UpdatedAt = time.Time{}
	require.Equal(t, KindConfig{MaxInflight: 7, TaskDeadlineSecs: 30, ResyncRecomposes: true, MaxTransientAttempts: 20}, got,
		"nil patch fields are kept")

	k, outcome, err := e.store.ApplyManifest(ctx, []byte(withCap(9)))
	require.NoError(t, err)
	require.Equal(t, Configured, outcome)
	require.Equal(t, 9, k.Manifest.MaxInflight, "the manifest carries the new seed")
	require.Equal(t, KindConfig{MaxInflight: 7, TaskDeadlineSecs: 30, ResyncRecomposes: true, MaxTransientAttempts: 20}, cfg(),
		"the operator's edit survives the re-apply")
}

func TestUpdateKindConfig_Rejections(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	before := e.tableCounts(t)
	var snapshot KindConfig
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT max_inflight, orphan_grace_secs FROM kind_config WHERE kind = 'vpc'`).
		Scan(&snapshot.MaxInflight, &snapshot.OrphanGraceSecs))

	_, err := e.store.UpdateKindConfig(ctx, "vpc", "v1", KindConfigPatch{MaxInflight: ptr(1), OrphanGraceSecs: ptr(-1)})
	requireInvalid(t, err, "orphanGraceSecs", "policy_invalid")
	_, err = e.store.UpdateKindConfig(ctx, "vpc", "v1", KindConfigPatch{TaskDeadlineSecs: ptr(1 << 40)})
	requireInvalid(t, err, "taskDeadlineSecs", "policy_invalid")
	_, err = e.store.UpdateKindConfig(ctx, "nope", "v1", KindConfigPatch{MaxInflight: ptr(1)})
	require.ErrorIs(t, err, ErrNotFound)
	_, err = e.store.UpdateKindConfig(ctx, "vpc", "v2", KindConfigPatch{MaxInflight: ptr(1)})
	require.ErrorIs(t, err, ErrNotFound)

	var after KindConfig
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT max_inflight, orphan_grace_secs FROM kind_config WHERE kind = 'vpc'`).
		Scan(&after.MaxInflight, &after.OrphanGraceSecs))
	require.Equal(t, snapshot, after, "a rejected patch changes nothing, not even its valid fields")
	if diff := cmp.Diff(before, e.tableCounts(t)); diff != "" {
		t.Errorf("rows changed (-before +after):\n%s", diff)
	}
}

// A kind version deleted and applied again continues its manifest_gen, so a
// process that cached the deleted document at a generation never validates
// against it in the version's next life.
func TestDeleteManifest_AVersionAppliedAgainContinuesItsGeneration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	manifestRequiring := func(field string) []byte {
		return []byte(`{"kind":"again","spec_schema":{"type":"object","required":["` + field + `"]},
		  "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`)
	}
	dryRun := func(spec string) error {
		_, _, err := e.store.ApplyResource(ctx, ApplyResourceInput{Kind: "again", Name: "r", Spec: json.RawMessage(spec), DryRun: true})
		return err
	}

	k, _, err := e.store.ApplyManifest(ctx, manifestRequiring("a"))
	require.NoError(t, err)
	require.Equal(t, int64(1), k.ManifestGen)
	requireInvalid(t, dryRun(`{"b":"x"}`), "spec/a", "required") // the first life's schema, now cached

	deleted, err := e.store.DeleteManifest(ctx, "again", "v1")
	require.NoError(t, err)
	require.True(t, deleted)
	k, outcome, err := e.store.ApplyManifest(ctx, manifestRequiring("b"))
	require.NoError(t, err)
	require.Equal(t, Created, outcome)
	require.Equal(t, int64(2), k.ManifestGen, "the generation continues from the deleted version's")
	require.NoError(t, dryRun(`{"b":"x"}`), "validated against the version applied again, not the cached one")
	requireInvalid(t, dryRun(`{"a":"x"}`), "spec/b", "required")
}
