package store

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// SubtreeSettled is the cheap probe the broker runs before reading a
// composite's subtree; it must agree with ComposedSubtree's Settled through
// every state a descendant passes: progressing, synced, failed, frozen,
// deleting, and for a nested composite's own children.
func TestSubtreeSettledAgreesWithComposedSubtree(t *testing.T) {
	ctx := context.Background()
	e := newEnvWithKinds(t)
	// Only composers own children: mid is a nested composite.
	_, _, err := e.store.ApplyManifest(ctx, []byte(`{"kind": "stack", "reactions": [
		{"name": "compose", "trigger": "specChange", "emits": ["children", "status"]},
		{"name": "rollup", "trigger": "childrenSettled", "emits": ["status"]}]}`))
	require.NoError(t, err)
	root := e.apply(t, ApplyResourceInput{Kind: "stack", Name: "root", Spec: json.RawMessage(`{}`)})
	mid := e.apply(t, ApplyResourceInput{Kind: "stack", Name: "mid", Spec: json.RawMessage(`{}`)})
	leaf := e.noop(t, "leaf", nil)
	deep := e.noop(t, "deep", nil)
	// root ← mid ← deep (nested composite), root ← leaf
	_, err = e.pool.Exec(ctx, `
UPDATE resources SET owner_id = $1, root_id = $1 WHERE id IN ($2, $3);
`, root.ID, mid.ID, leaf.ID)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `UPDATE resources SET owner_id = $1, root_id = $2 WHERE id = $3`, mid.ID, root.ID, deep.ID)
	require.NoError(t, err)

	check := func(step string, id uuid.UUID, want bool) {
		t.Helper()
		got, err := e.store.SubtreeSettled(ctx, id)
		require.NoError(t, err)
		sub, err := e.store.ComposedSubtree(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got, "%s: SubtreeSettled(%s)", step, id)
		require.Equal(t, sub.Settled, got, "%s: SubtreeSettled disagrees with ComposedSubtree", step)
	}
	// every child fresh (generation 1, synced 0): progressing
	check("fresh", root.ID, false)
	check("fresh", mid.ID, false)

	e.setScalars(t, leaf.ID, scalars{generation: 1, syncedGen: 1, healthOK: true})
	e.setScalars(t, mid.ID, scalars{generation: 1, syncedGen: 1, healthOK: true})
	check("deep still progressing", root.ID, false)
	check("deep still progressing", mid.ID, false)

	// a failure for the live spec is settled (it does not hold a rollup)
	e.setScalars(t, deep.ID, scalars{generation: 1, failureGen: 1, healthOK: true})
	check("deep failed", root.ID, true)
	check("deep failed", mid.ID, true)

	// a new spec on the leaf: progressing again
	e.setScalars(t, leaf.ID, scalars{generation: 2, syncedGen: 1, healthOK: true})
	check("leaf lagging", root.ID, false)
	check("leaf lagging, mid's subtree", mid.ID, true)

	// frozen and deleting descendants never hold a rollup back
	e.setScalars(t, leaf.ID, scalars{generation: 2, syncedGen: 1, healthOK: true, frozen: "infinity"})
	check("leaf quarantined", root.ID, true)
	e.setScalars(t, leaf.ID, scalars{generation: 2, syncedGen: 1, healthOK: true, deleting: true})
	check("leaf deleting", root.ID, true)

	// a root that is gone has nothing to wait for
	got, err := e.store.SubtreeSettled(ctx, uuid.New())
	require.NoError(t, err)
	require.True(t, got)
}

// The nodes a walk visits share nothing: each has its own identity, owner
// and status, whatever the walk reuses to read the rows.
func TestComposedSubtree_NodesShareNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnvWithKinds(t)
	_, _, err := e.store.ApplyManifest(ctx, []byte(`{"kind": "stack", "reactions": [
		{"name": "compose", "trigger": "specChange", "emits": ["children", "status"]}]}`))
	require.NoError(t, err)
	root := e.apply(t, ApplyResourceInput{Kind: "stack", Name: "root", Spec: json.RawMessage(`{}`)})
	mid := e.apply(t, ApplyResourceInput{Kind: "stack", Name: "mid", Spec: json.RawMessage(`{}`)})
	a, b, deep := e.noop(t, "a", nil), e.noop(t, "b", nil), e.noop(t, "deep", nil)
	_, err = e.pool.Exec(ctx, `UPDATE resources SET owner_id = $1, root_id = $1 WHERE id IN ($2, $3, $4)`, root.ID, mid.ID, a.ID, b.ID)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `UPDATE resources SET owner_id = $1, root_id = $2 WHERE id = $3`, mid.ID, root.ID, deep.ID)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `UPDATE resources SET status = jsonb_build_object('name', name) WHERE id IN ($1, $2, $3, $4)`,
		mid.ID, a.ID, b.ID, deep.ID)
	require.NoError(t, err)

	sub, err := e.store.ComposedSubtree(ctx, root.ID)
	require.NoError(t, err)
	got := map[string][]string{}
	for _, n := range sub.Nodes {
		require.NotNil(t, n.OwnerID, n.Name)
		got[n.Name] = []string{n.ID.String(), n.OwnerID.String(), string(n.Status)}
	}
	require.Equal(t, map[string][]string{
		"a":    {a.ID.String(), root.ID.String(), `{"name": "a"}`},
		"b":    {b.ID.String(), root.ID.String(), `{"name": "b"}`},
		"mid":  {mid.ID.String(), root.ID.String(), `{"name": "mid"}`},
		"deep": {deep.ID.String(), mid.ID.String(), `{"name": "deep"}`},
	}, got)
}

// TestSubtreeResources_LeavesTheDocumentsOut: the subtree the hub loads for
// subtreeProgress (at its start, and for every followed tree after a missed
// announcement) carries what the progress needs — id, kind, name, phase,
// owner, failure — without each descendant's labels, spec and status: read
// whole, a 1,000-child composition with 11 KB of documents a child was
// 11 MB and 350 ms a load.
func TestSubtreeResources_LeavesTheDocumentsOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	require.NoError(t, applyFixtureKinds(ctx, e.store))
	root := uuid.New()
	_, err := e.pool.Exec(ctx, `INSERT INTO resources (id, kind, version, name, shard_id, status) VALUES ($1, 'bom', 'v1', 'root', shard_of($1), '{"a":1}')`, root)
	require.NoError(t, err)
	_, err = e.pool.Exec(ctx, `
INSERT INTO resources (id, kind, version, name, owner_id, root_id, shard_id, labels, spec, status)
SELECT g, 'subnet', 'v1', 'c-' || i, $1, $1, shard_of(g), '{"team":"t1"}', '{"size":1}', '{"blob":"x"}'
  FROM (SELECT gen_random_uuid() g, i FROM generate_series(1, 10) i) s`, root)
	require.NoError(t, err)
	rows, err := e.store.SubtreeResources(ctx, root)
	require.NoError(t, err)
	require.Len(t, rows, 11)
	for _, r := range rows {
		require.NotEmpty(t, r.Name)
		require.NotEmpty(t, r.Kind)
		require.NotEmpty(t, r.Phase)
		if r.ID != root {
			require.Equal(t, root, *r.OwnerID, r.Name)
		}
		require.Nil(t, r.Spec, r.Name)
		require.Nil(t, r.Status, r.Name)
		require.Empty(t, r.Labels, r.Name)
	}
}
