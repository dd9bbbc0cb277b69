package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
)

const (
	netV1 = `{"kind":"net","spec_schema":{"type":"object","properties":{"cidr":{"type":"string"},"zone":{"type":"string"}},
		"required":["cidr"]},"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
	netV2 = `{"kind":"net","version":"v2","spec_schema":{"type":"object","properties":{"cidr":{"type":"string"},
		"zone":{"type":"string"},"ipv6":{"type":"boolean"}},"required":["cidr"]},
		"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
)

func TestApplyResource_AnotherVersionMigratesLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, m := range []string{netV1, netV2} {
		_, _, err := e.store.ApplyManifest(ctx, []byte(m))
		require.NoError(t, err)
	}
	r := e.apply(t, ApplyResourceInput{Kind: "net", Name: "a", Version: "v1", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)})
	require.Equal(t, int64(1), r.Generation)
	var queued string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT version FROM work_queue WHERE resource_id = $1`, r.ID).Scan(&queued))
	require.Equal(t, "v1", queued)

	_, _, err := e.store.ApplyResource(ctx, ApplyResourceInput{Kind: "net", Name: "a", Version: "v2",
		Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","ipv6":"yes"}`)})
	requireInvalid(t, err, "spec/ipv6", "type")

	m, outcome, err := e.store.ApplyResource(ctx, ApplyResourceInput{Kind: "net", Name: "a", Version: "v2",
		Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)})
	require.NoError(t, err)
	require.Equal(t, Migrated, outcome)
	require.Equal(t, "v2", m.Version)
	require.Equal(t, int64(2), m.Generation, "the same spec under another version is a new generation")
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT version FROM work_queue WHERE resource_id = $1`, r.ID).Scan(&queued))
	require.Equal(t, "v2", queued, "the unclaimed reconcile moved with it")

	again, outcome, err := e.store.ApplyResource(ctx, ApplyResourceInput{Kind: "net", Name: "a", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)})
	require.NoError(t, err)
	require.Equal(t, Unchanged, outcome, "no version named: it keeps v2")
	require.Equal(t, "v2", again.Version)

	page, err := e.store.ListEvents(ctx, r.ID, 10, "")
	require.NoError(t, err)
	evs := page.Items
	require.Equal(t, resource.ReasonVersionMigrated, evs[0].Reason)
	require.Equal(t, "v1 → v2, generation 2", evs[0].Message)

	for v, want := range map[string]int64{"v1": 0, "v2": 1} {
		u, err := e.store.KindUsage(ctx, manifest.KindVersion{Kind: "net", Version: v}, 0)
		require.NoError(t, err)
		require.Equal(t, want, u.Resources, "the counts moved with it (%s)", v)
	}
	_, err = e.store.FoldPhaseCounts(ctx)
	require.NoError(t, err)
	u, err := e.store.KindUsage(ctx, manifest.KindVersion{Kind: "net", Version: "v2"}, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), u.Resources, "and stay right once folded")
}

func TestApplyManifest_SchemaStabilityGate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyManifest(ctx, []byte(netV1))
	require.NoError(t, err)
	for i := range MaxBrokenListed + 5 {
		e.apply(t, ApplyResourceInput{Kind: "net", Name: fmt.Sprintf("n%02d", i), Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","zone":"a"}`)})
	}
	e.apply(t, ApplyResourceInput{Kind: "net", Name: "plain", Spec: json.RawMessage(`{"cidr":"10.1.0.0/16"}`)})

	compatible := `{"kind":"net","spec_schema":{"type":"object","properties":{"cidr":{"type":"string"},"zone":{"type":"string"},
		"tier":{"type":"string"}},"required":["cidr"]},"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
	_, outcome, err := e.store.ApplyManifest(ctx, []byte(compatible))
	require.NoError(t, err, "an added optional field breaks nothing")
	require.Equal(t, Configured, outcome)

	cases := map[string]struct {
		reason    string
		raw       string
		count     int
		fields    []string
		firstName string
	}{
		"Rejects": {"zone must now be an integer: the 25 resources with a zone fail",
			`{"kind":"net","spec_schema":{"type":"object","properties":{"cidr":{"type":"string"},"zone":{"type":"integer"}},
			"required":["cidr"]},"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`,
			MaxBrokenListed + 5, []string{"spec/zone [type]"}, "n00"},
		"DropsRequired": {"cidr is required and no longer declared (the schema stays open): every resource carries it",
			`{"kind":"net","spec_schema":{"type":"object","properties":{"prefix":{"type":"string"},"zone":{"type":"string"}}},
			"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`,
			MaxBrokenListed + 6, []string{"spec/cidr [dropped]"}, "n00"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			before, err := e.store.GetKind(ctx, "net", "v1")
			require.NoError(t, err)
			_, _, err = e.store.ApplyManifest(ctx, []byte(tc.raw))
			require.ErrorIs(t, err, ErrConflict, tc.reason)
			var brk *BreakingChangeError
			require.True(t, errors.As(err, &brk), "%v", err)
			require.Equal(t, tc.count, brk.Count, tc.reason)
			require.Len(t, brk.Resources, MaxBrokenListed, "the list is bounded; the count is not")
			require.Equal(t, tc.firstName, brk.Resources[0])
			require.Equal(t, tc.fields, brk.Fields)
			require.Contains(t, err.Error(), "n00, n01")
			require.Contains(t, err.Error(), fmt.Sprintf("and %d more", tc.count-MaxBrokenListed))
			after, err := e.store.GetKind(ctx, "net", "v1")
			require.NoError(t, err)
			require.Equal(t, before.ManifestGen, after.ManifestGen, "nothing written")
		})
	}

	// A new version is never gated: it has no resources.
	breakingV2 := `{"kind":"net","version":"v2","spec_schema":{"type":"object","properties":{"zone":{"type":"integer"}}},
		"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
	_, outcome, err = e.store.ApplyManifest(ctx, []byte(breakingV2))
	require.NoError(t, err)
	require.Equal(t, Created, outcome)

	// The owner accepts it explicitly.
	k, outcome, err := e.store.ApplyManifestWith(ctx, []byte(cases["Rejects"].raw), ManifestApplyOptions{AcceptBreaking: true})
	require.NoError(t, err)
	require.Equal(t, Configured, outcome)
	require.JSONEq(t, `{"type":"integer"}`, string(mustProp(t, k.Manifest.SpecSchema, "zone")))
}

func mustProp(t *testing.T, schema json.RawMessage, name string) json.RawMessage {
	t.Helper()
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	require.NoError(t, json.Unmarshal(schema, &s))
	return s.Properties[name]
}

func TestDeleteManifest_NeverStrands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, m := range []string{netV1, netV2} {
		_, _, err := e.store.ApplyManifest(ctx, []byte(m))
		require.NoError(t, err)
	}
	e.apply(t, ApplyResourceInput{Kind: "net", Name: "a", Version: "v1", Spec: json.RawMessage(`{"cidr":"x"}`)})
	_, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "net", Name: "default", IsDefault: true,
		Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)

	_, err = e.store.DeleteManifest(ctx, "net", "v1")
	var brk *BreakingChangeError
	require.ErrorAs(t, err, &brk)
	require.Equal(t, []string{"a"}, brk.Resources)
	require.Contains(t, err.Error(), "kind net/v1 still has 1 resource(s): a")

	ok, err := e.store.DeleteManifest(ctx, "net", "v2")
	require.NoError(t, err, "v2 has no resources and is not the last version")
	require.True(t, ok)

	_, _, err = e.store.ApplyManifest(ctx, []byte(netV2))
	require.NoError(t, err)
	_, _, err = e.store.ApplyResource(ctx, ApplyResourceInput{Kind: "net", Name: "a", Version: "v2", Spec: json.RawMessage(`{"cidr":"x"}`)})
	require.NoError(t, err, "migrate it away")
	ok, err = e.store.DeleteManifest(ctx, "net", "v1")
	require.NoError(t, err)
	require.True(t, ok)
	var n int
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT count(*) FROM kind_config WHERE kind = 'net' AND version = 'v1'`).Scan(&n))
	require.Zero(t, n, "its policy went with it")

	_, err = e.store.DeleteManifest(ctx, "net", "v2")
	require.ErrorAs(t, err, &brk, "the last version: its resource and providerconfig would be stranded")
	require.Equal(t, []string{"providerconfig net/default"}, brk.Others)

	ok, err = e.store.DeleteManifest(ctx, "net", "v9")
	require.NoError(t, err)
	require.False(t, ok, "not applied")
}

func TestUpdateKindConfig_MaxTransientAttempts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	k, _, err := e.store.ApplyManifest(ctx, []byte(netV1))
	require.NoError(t, err)
	require.Equal(t, manifest.DefaultMaxTransientAttempts, k.Config.MaxTransientAttempts, "the seed when the manifest names none")
	seeded := `{"kind":"seeded","max_transient_attempts":3,"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
	k, _, err = e.store.ApplyManifest(ctx, []byte(seeded))
	require.NoError(t, err)
	require.Equal(t, 3, k.Config.MaxTransientAttempts)

	n := 7
	c, err := e.store.UpdateKindConfig(ctx, "seeded", "v1", KindConfigPatch{MaxTransientAttempts: &n})
	require.NoError(t, err)
	require.Equal(t, 7, c.MaxTransientAttempts)
	_, _, err = e.store.ApplyManifest(ctx, []byte(`{"kind":"seeded","max_transient_attempts":4,"description":"x",
		"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`))
	require.NoError(t, err)
	k, err = e.store.GetKind(ctx, "seeded", "v1")
	require.NoError(t, err)
	require.Equal(t, 7, k.Config.MaxTransientAttempts, "a re-apply never clobbers the live edit")

	bad := -1
	_, err = e.store.UpdateKindConfig(ctx, "seeded", "v1", KindConfigPatch{MaxTransientAttempts: &bad})
	requireInvalid(t, err, "maxTransientAttempts", "policy_invalid")
}

// A providerconfig serves every version of its kind, and its writes are
// checked against each version's config_schema: a manifest apply whose
// config_schema would reject a stored providerconfig — a re-applied version
// or a new one — is a breaking change, refused with the configs and fields
// named unless accepted.
func TestApplyManifest_ConfigSchemaGate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	withConfig := func(version, config string) string {
		return `{"kind":"net","version":"` + version + `","spec_schema":{"type":"object"},"config_schema":` + config +
			`,"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
	}
	_, _, err := e.store.ApplyManifest(ctx, []byte(withConfig("v1", `{"type":"object","properties":{"region":{"type":"string"}}}`)))
	require.NoError(t, err)
	for _, name := range []string{"east", "west"} {
		_, _, err := e.store.ApplyProviderConfig(ctx, ProviderConfigInput{Kind: "net", Name: name,
			Spec: json.RawMessage(`{"region":"` + name + `"}`)})
		require.NoError(t, err)
	}
	_, _, err = e.store.ApplyManifest(ctx, []byte(withConfig("v1",
		`{"type":"object","properties":{"region":{"type":"string"},"tier":{"type":"string"}}}`)))
	require.NoError(t, err, "an added optional field breaks no config")

	cases := map[string]struct {
		reason string
		raw    string
	}{
		"Reapplied": {"region must now be an integer", withConfig("v1", `{"type":"object","properties":{"region":{"type":"integer"}}}`)},
		"NewVersion": {"a new version's config_schema must accept the configs that serve it too",
			withConfig("v2", `{"type":"object","properties":{"region":{"type":"integer"}}}`)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, _, err := e.store.ApplyManifest(ctx, []byte(tc.raw))
			require.ErrorIs(t, err, ErrConflict, tc.reason)
			var brk *BreakingChangeError
			require.True(t, errors.As(err, &brk), "%v", err)
			require.Equal(t, []string{"providerconfig net/east", "providerconfig net/west"}, brk.Others)
			require.Equal(t, []string{"spec/region [type]"}, brk.Fields)
			require.Contains(t, err.Error(), "config_schema of kind net/")
			require.Contains(t, err.Error(), "breaks 2 stored providerconfig(s)")
			_, _, err = e.store.DryRunManifest(ctx, []byte(tc.raw))
			require.ErrorAs(t, err, &brk, "a dry run refuses it alike")
		})
	}
	require.Equal(t, 0, scalarInt(t, e, `SELECT count(*) FROM kind_manifest WHERE version = 'v2'`), "nothing written")

	_, outcome, err := e.store.ApplyManifestWith(ctx, []byte(cases["NewVersion"].raw), ManifestApplyOptions{AcceptBreaking: true})
	require.NoError(t, err, "the owner accepts it explicitly")
	require.Equal(t, Created, outcome)
	_, outcome, err = e.store.ApplyManifest(ctx, []byte(withConfig("v2",
		`{"type":"object","properties":{"region":{"type":"integer"},"tier":{"type":"string"}}}`)))
	require.NoError(t, err, "the configs it left invalid are not broken again by a compatible change")
	require.Equal(t, Configured, outcome)
}

// The gate refuses what the change breaks: a resource the current schema
// already rejects (left behind by an accepted breaking change) is not broken
// by a later compatible change, which passes without asking.
func TestApplyManifest_SchemaGateIgnoresResourcesAlreadyBroken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	_, _, err := e.store.ApplyManifest(ctx, []byte(netV1))
	require.NoError(t, err)
	e.apply(t, ApplyResourceInput{Kind: "net", Name: "old", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","zone":"a"}`)})
	zoneInt := `{"kind":"net","spec_schema":{"type":"object","properties":{"cidr":{"type":"string"},"zone":{"type":"integer"}},
		"required":["cidr"]},"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
	_, _, err = e.store.ApplyManifestWith(ctx, []byte(zoneInt), ManifestApplyOptions{AcceptBreaking: true})
	require.NoError(t, err, "the owner accepted it: net/old keeps its string zone")

	withTier := `{"kind":"net","spec_schema":{"type":"object","properties":{"cidr":{"type":"string"},"zone":{"type":"integer"},
		"tier":{"type":"string"}},"required":["cidr"]},"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
	_, outcome, err := e.store.ApplyManifest(ctx, []byte(withTier))
	require.NoError(t, err, "an added optional field breaks nothing the schema did not reject already")
	require.Equal(t, Configured, outcome)

	stricter := `{"kind":"net","spec_schema":{"type":"object","properties":{"cidr":{"type":"string","maxLength":4},
		"zone":{"type":"integer"},"tier":{"type":"string"}},"required":["cidr"]},
		"reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`
	_, _, err = e.store.ApplyManifest(ctx, []byte(stricter))
	var brk *BreakingChangeError
	require.ErrorAs(t, err, &brk, "a change that breaks it further is still refused")
	require.Equal(t, []string{"old"}, brk.Resources)
}
