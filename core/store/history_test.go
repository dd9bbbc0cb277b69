package store

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
)

func TestSpecHistory_BoundedByTheKindsLimit(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	require.NoError(t, e.store.SetHistoryLimit(ctx, "vpc", "v1", 3))
	var err error
	require.ErrorIs(t, e.store.SetHistoryLimit(ctx, "vpc", "v1", 1001), ErrInvalid)
	require.ErrorIs(t, e.store.SetHistoryLimit(ctx, "nope", "v1", 3), ErrNotFound)
	var r resource.Resource
	for _, cidr := range []string{"10.0.0.0/16", "10.1.0.0/16", "10.2.0.0/16", "10.3.0.0/16", "10.4.0.0/16"} {
		r = e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: json.RawMessage(`{"cidr":"` + cidr + `"}`), Actor: "alice"})
	}
	r = e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: r.Spec, Labels: map[string]string{"team": "a"}})
	hs, err := e.store.SpecHistory(ctx, r.ID, 0)
	require.NoError(t, err)
	var gens []int64
	for _, h := range hs {
		gens = append(gens, h.Generation)
	}
	require.Equal(t, []int64{5, 4, 3}, gens, "the newest history_limit generations, newest first")
	require.Equal(t, map[string]string{"team": "a"}, hs[0].Labels, "a labels-only apply rewrites its generation's row")
	require.Equal(t, resource.ReasonLabelsUpdated, hs[0].Reason)
	require.Equal(t, "alice", hs[1].Actor)
	require.JSONEq(t, `{"cidr":"10.2.0.0/16"}`, string(hs[2].Spec))
	require.Equal(t, 3, scalarInt(t, e, `SELECT count(*) FROM resource_spec_history WHERE resource_id = $1`, r.ID))

	require.NoError(t, e.store.SetHistoryLimit(ctx, "vpc", "v1", 0))
	e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: json.RawMessage(`{"cidr":"10.9.0.0/16"}`)})
	require.Zero(t, scalarInt(t, e, `SELECT count(*) FROM resource_spec_history WHERE resource_id = $1`, r.ID), "0 keeps none")
}

func scalarInt(t *testing.T, e env, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func TestRollbackResource_ANewGenerationWithTheOldSpec(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`),
		Labels: map[string]string{"v": "1"}})
	cur := e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: json.RawMessage(`{"cidr":"10.1.0.0/16"}`)})
	require.EqualValues(t, 2, cur.Generation)

	r, outcome, err := e.store.RollbackResource(ctx, "vpc", "net", 1, "bob", false)
	require.NoError(t, err)
	require.Equal(t, Configured, outcome)
	require.EqualValues(t, 3, r.Generation)
	require.JSONEq(t, `{"cidr":"10.0.0.0/16"}`, string(r.Spec))
	require.Equal(t, map[string]string{"v": "1"}, r.Labels)
	require.True(t, scalarInt(t, e, `SELECT count(*) FROM work_queue WHERE resource_id = $1 AND generation = 3`, r.ID) == 1,
		"the rollback's generation is scheduled like any spec change")
	page, err := e.store.ListEvents(ctx, r.ID, 1, "")
	require.NoError(t, err)
	require.Equal(t, resource.ReasonRolledBack, page.Items[0].Reason)
	require.Equal(t, "bob", page.Items[0].Actor)
	require.Equal(t, "generation 3 carries the spec of generation 1", page.Items[0].Message)
	hs, err := e.store.SpecHistory(ctx, r.ID, 1)
	require.NoError(t, err)
	require.EqualValues(t, 1, hs[0].RolledBackFrom)
	require.Equal(t, "bob", hs[0].Actor)

	_, _, err = e.store.RollbackResource(ctx, "vpc", "net", 3, "bob", false)
	require.ErrorIs(t, err, ErrInvalid, "not an earlier generation")
	e.exec(t, `DELETE FROM resource_spec_history WHERE resource_id = $1 AND generation = 2`, r.ID)
	_, _, err = e.store.RollbackResource(ctx, "vpc", "net", 2, "bob", false)
	require.ErrorIs(t, err, ErrNotFound, "a pruned generation")
	_, _, err = e.store.RollbackResource(ctx, "vpc", "nope", 1, "bob", false)
	require.ErrorIs(t, err, ErrNotFound)
}

// writes counts every row a dry run could write.
func writes(t *testing.T, e env) int {
	t.Helper()
	return scalarInt(t, e, `SELECT (SELECT count(*) FROM resources) + (SELECT count(*) FROM resource_events)
		+ (SELECT count(*) FROM resource_spec_history) + (SELECT count(*) FROM work_queue)
		+ (SELECT count(*) FROM resource_labels)`)
}

func TestDryRun_WritesNothingAndFailsLikeARealApply(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)})
	before := writes(t, e)
	var updatedAt string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT updated_at::text FROM resources WHERE name = 'net'`).Scan(&updatedAt))

	p, err := e.store.PlanResource(ctx, ApplyResourceInput{Kind: "vpc", Name: "net",
		Spec: json.RawMessage(`{"cidr":"10.1.0.0/16"}`), Labels: map[string]string{"a": "b"}})
	require.NoError(t, err)
	require.Equal(t, Configured, p.Outcome)
	require.EqualValues(t, 2, p.After.Generation)
	require.Equal(t, []resource.Change{{Path: "/cidr", Before: json.RawMessage(`"10.0.0.0/16"`),
		After: json.RawMessage(`"10.1.0.0/16"`)}}, p.SpecChanges)
	require.Equal(t, []resource.Change{{Path: "/a", After: json.RawMessage(`"b"`)}}, p.LabelsChanges)

	p, err = e.store.PlanResource(ctx, ApplyResourceInput{Kind: "vpc", Name: "new", Spec: json.RawMessage(`{"cidr":"10.2.0.0/16"}`)})
	require.NoError(t, err)
	require.Equal(t, Created, p.Outcome)
	require.Nil(t, p.Before)
	_, _, err = e.store.RollbackResource(ctx, "vpc", "net", 1, "x", true)
	require.ErrorIs(t, err, ErrInvalid, "a rollback dry run checks like a rollback: generation 1 is the live one")

	require.Equal(t, before, writes(t, e), "nothing written")
	var after string
	require.NoError(t, e.pool.QueryRow(ctx, `SELECT updated_at::text FROM resources WHERE name = 'net'`).Scan(&after))
	require.Equal(t, updatedAt, after)

	bad := []ApplyResourceInput{
		{Kind: "vpc", Name: "net", Spec: json.RawMessage(`{"cidr": 5}`)},
		{Kind: "nope", Name: "x", Spec: json.RawMessage(`{}`)},
		{Kind: "vpc", Name: "Bad_Name", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)},
		{Kind: "vpc", Name: "net", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`), ProviderConfigRef: "missing"},
		{Kind: "vpc", Name: "net", Version: "v9", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)},
	}
	for _, in := range bad {
		dry := in
		dry.DryRun = true
		_, _, dryErr := e.store.ApplyResource(ctx, dry)
		_, _, realErr := e.store.ApplyResource(ctx, in)
		require.Error(t, realErr)
		require.Equal(t, realErr.Error(), dryErr.Error(), "the same error as a real apply")
		var want *InvalidError
		if errors.As(realErr, &want) {
			var got *InvalidError
			require.ErrorAs(t, dryErr, &got)
			require.Equal(t, want.Rule, got.Rule)
		}
	}
	require.Equal(t, before, writes(t, e), "nothing written by the failures either")
}

func (e env) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := e.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// catalog counts the rows a manifest, providerconfig or binding dry run
// could write.
func catalog(t *testing.T, e env) string {
	t.Helper()
	var s string
	require.NoError(t, e.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM kind_manifest) || '/' || (SELECT coalesce(max(manifest_gen), 0) FROM kind_manifest) || '/' ||
		(SELECT count(*) FROM kind_config) || '/' || (SELECT count(*) FROM providerconfigs) || '/' ||
		(SELECT coalesce(max(updated_at)::text, '') FROM providerconfigs) || '/' || (SELECT count(*) FROM reactor_bindings)`).Scan(&s))
	return s
}

func TestDryRun_ManifestsConfigsAndBindings(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	before := catalog(t, e)
	dry := WithDryRun(ctx)

	k, outcome, err := e.store.DryRunManifest(ctx, []byte(`{"kind":"fresh","reactions":[{"name":"w","trigger":"specChange","emits":["status"]}]}`))
	require.NoError(t, err)
	require.Equal(t, Created, outcome)
	require.Equal(t, "fresh", k.Name)
	edited := strings.Replace(vpcManifest, "a leaf network", "edited", 1)
	k, outcome, err = e.store.DryRunManifest(ctx, []byte(edited))
	require.NoError(t, err)
	require.Equal(t, Configured, outcome)
	require.EqualValues(t, 2, k.ManifestGen)
	_, _, dryErr := e.store.DryRunManifest(ctx, []byte(`{"kind":"bad","max_inflight":-1,"reactions":[]}`))
	_, _, realErr := e.store.ApplyManifest(ctx, []byte(`{"kind":"bad","max_inflight":-1,"reactions":[]}`))
	require.Error(t, realErr)
	require.Equal(t, realErr.Error(), dryErr.Error())

	_, outcome, err = e.store.ApplyProviderConfig(dry, ProviderConfigInput{Kind: "vpc", Name: "staging",
		Spec: json.RawMessage(`{"region":"eu"}`)})
	require.NoError(t, err)
	require.Equal(t, Created, outcome)
	bad := ProviderConfigInput{Kind: "vpc", Name: "staging", Spec: json.RawMessage(`{"region":5}`)}
	_, _, dryErr = e.store.ApplyProviderConfig(dry, bad)
	_, _, realErr = e.store.ApplyProviderConfig(ctx, bad)
	require.ErrorIs(t, realErr, ErrInvalid)
	require.Equal(t, realErr.Error(), dryErr.Error())

	_, outcome, err = e.store.ApplyReactorBinding(dry, ReactorBindingInput{Name: "b", WatchKind: "vpc",
		Transition: manifest.TransitionSynced, Reactor: "statussink"})
	require.NoError(t, err)
	require.Equal(t, Created, outcome)

	require.Equal(t, before, catalog(t, e), "nothing written")
	// the would-be manifest generation never reached the shared kind cache
	r := e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)})
	require.EqualValues(t, 1, r.Generation)
	_, _, err = e.store.ApplyManifest(ctx, []byte(strings.Replace(vpcManifest, `"additionalProperties": false
		},
		"config_schema"`, `"additionalProperties": true
		},
		"config_schema"`, 1)))
	require.NoError(t, err)
	e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net2", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","extra":1}`)})
}

// A version migration is an apply that writes a new generation: the history
// keeps it, with the version of every kept generation, and a rollback
// restores a generation at the version it was applied at (migrating the
// resource back live); a generation of a version no longer applied is refused
// by name.
func TestRollbackResource_RestoresTheGenerationsVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	for _, m := range []string{netV1, netV2} {
		_, _, err := e.store.ApplyManifest(ctx, []byte(m))
		require.NoError(t, err)
	}
	e.apply(t, ApplyResourceInput{Kind: "net", Name: "a", Version: "v1", Spec: json.RawMessage(`{"cidr":"10.0.0.0/16"}`)})
	_, outcome, err := e.store.ApplyResource(ctx, ApplyResourceInput{Kind: "net", Name: "a", Version: "v2",
		Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","ipv6":true}`), Actor: "carol"})
	require.NoError(t, err)
	require.Equal(t, Migrated, outcome)

	cur, err := e.store.GetResource(ctx, "net", "a")
	require.NoError(t, err)
	hs, err := e.store.SpecHistory(ctx, cur.ID, 0)
	require.NoError(t, err)
	require.Len(t, hs, 2, "the migration's generation is kept")
	require.EqualValues(t, 2, hs[0].Generation)
	require.Equal(t, resource.ReasonVersionMigrated, hs[0].Reason)
	require.Equal(t, "carol", hs[0].Actor)
	require.Equal(t, []string{"v2", "v1"}, []string{hs[0].Version, hs[1].Version})

	r, outcome, err := e.store.RollbackResource(ctx, "net", "a", 1, "bob", false)
	require.NoError(t, err)
	require.Equal(t, Migrated, outcome)
	require.Equal(t, "v1", r.Version, "generation 1 was applied at v1")
	require.EqualValues(t, 3, r.Generation)
	require.JSONEq(t, `{"cidr":"10.0.0.0/16"}`, string(r.Spec))
	page, err := e.store.ListEvents(ctx, r.ID, 1, "")
	require.NoError(t, err)
	require.Equal(t, resource.ReasonRolledBack, page.Items[0].Reason)
	require.Equal(t, "generation 3 carries the spec of generation 1 (v2 → v1)", page.Items[0].Message)
	hs, err = e.store.SpecHistory(ctx, r.ID, 1)
	require.NoError(t, err)
	require.Equal(t, "v1", hs[0].Version)
	require.EqualValues(t, 1, hs[0].RolledBackFrom)
	require.Equal(t, resource.ReasonRolledBack, hs[0].Reason)

	// back to v2's generation, then retire v1: generation 1 and 3 cannot be restored
	_, _, err = e.store.RollbackResource(ctx, "net", "a", 2, "bob", false)
	require.NoError(t, err)
	_, err = e.store.DeleteManifest(ctx, "net", "v1")
	require.NoError(t, err)
	_, _, err = e.store.RollbackResource(ctx, "net", "a", 1, "bob", true)
	requireInvalid(t, err, "toGeneration", "unknown_version")
	require.Contains(t, err.Error(), "generation 1 was applied at version v1, which kind net no longer has")
}

// A rollback to a generation whose spec is the live one restores its labels
// without a new generation, and is still recorded as the rollback it is.
func TestRollbackResource_LabelsOnlyIsStillARollback(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	a, b := json.RawMessage(`{"cidr":"10.0.0.0/16"}`), json.RawMessage(`{"cidr":"10.1.0.0/16"}`)
	e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: a, Labels: map[string]string{"v": "1"}})
	e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: b, Labels: map[string]string{"v": "2"}})
	e.apply(t, ApplyResourceInput{Kind: "vpc", Name: "net", Spec: a, Labels: map[string]string{"v": "2"}})

	r, outcome, err := e.store.RollbackResource(ctx, "vpc", "net", 1, "bob", false)
	require.NoError(t, err)
	require.Equal(t, Configured, outcome)
	require.EqualValues(t, 3, r.Generation, "the spec is the live one: no new generation")
	require.Equal(t, map[string]string{"v": "1"}, r.Labels)
	page, err := e.store.ListEvents(ctx, r.ID, 1, "")
	require.NoError(t, err)
	require.Equal(t, resource.ReasonRolledBack, page.Items[0].Reason)
	require.Equal(t, "bob", page.Items[0].Actor)
	require.Equal(t, "generation 3 carries the labels of generation 1", page.Items[0].Message)
	hs, err := e.store.SpecHistory(ctx, r.ID, 1)
	require.NoError(t, err)
	require.Equal(t, resource.ReasonRolledBack, hs[0].Reason)
	require.EqualValues(t, 1, hs[0].RolledBackFrom)
}
