package api_test

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

// dryRunFields selects every nested field of a resource, those that read
// stored state included.
const dryRunFields = `id name generation spec
	owner { id } root { id } children { items { id } } dependencies { upstream { id } } dependents { id }
	conditions { type status } providerConfig { name } definition { name } deadLetter { generation }
	operations { id } history { items { reason } }
	waitingOn { gate } specHistory { generation } specDiff(from: 1) { from to spec { path before after } }`

type dryRunResource struct {
	ID          string
	Name        string
	Generation  int
	Spec        json.RawMessage
	Children    struct{ Items []struct{ ID string } }
	History     struct{ Items []struct{ Reason string } }
	WaitingOn   []struct{ Gate string }
	SpecHistory []struct{ Generation int }
	SpecDiff    struct {
		From, To int
		Spec     []struct {
			Path          string
			Before, After json.RawMessage
		}
	}
}

// A dry run answers its planned resource whole: a resource the dry run would
// create is not stored, and the fields that read stored state answer empty
// for it (no gates, no history) instead of NOT_FOUND, which nulled the whole
// result. A dry-run update's specDiff diffs a kept generation against the
// planned one.
func TestDryRun_AnswersThePlannedResourceWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.manifest(workerKind)

	for name, mutation := range map[string]string{
		"apply": `mutation { r: applyResource(input: {kind: "leaf", name: "new", spec: {size: 1}}, dryRun: true) { ` +
			dryRunFields + ` } }`,
	} {
		var out struct{ R dryRunResource }
		r := e.do(adminToken, mutation, nil)
		require.Empty(t, r.Errors, "%s: %s", name, r.Data)
		require.NoError(t, json.Unmarshal(r.Data, &out))
		require.Equal(t, 1, out.R.Generation)
		require.Empty(t, out.R.WaitingOn)
		require.Empty(t, out.R.SpecHistory)
		require.Empty(t, out.R.History.Items)
		require.Empty(t, out.R.Children.Items)
		require.Equal(t, 1, out.R.SpecDiff.To)
		require.Empty(t, out.R.SpecDiff.Spec)
	}
	var got struct{ Resource *struct{ ID string } }
	e.ok(`{ resource(kind: "leaf", name: "new") { id } }`, nil, &got)
	require.Nil(t, got.Resource, "a dry run writes nothing")

	// A dry-run update of a stored resource: its stored state answers, and
	// specDiff's default `to` is the planned generation, not kept.
	e.apply("leaf", "old", `{size: 1}`)
	e.apply("leaf", "old", `{size: 2}`)
	for name, mutation := range map[string]string{
		"apply": `mutation { r: applyResource(input: {kind: "leaf", name: "old", spec: {size: 3}}, dryRun: true) { ` +
			dryRunFields + ` } }`,
		"rollback": `mutation { r: rollbackResource(kind: "leaf", name: "old", toGeneration: 1, dryRun: true) { ` +
			dryRunFields + ` } }`,
	} {
		var out struct{ R dryRunResource }
		r := e.do(adminToken, mutation, nil)
		require.Empty(t, r.Errors, "%s: %s", name, r.Data)
		require.NoError(t, json.Unmarshal(r.Data, &out))
		require.Equal(t, 3, out.R.Generation, name)
		require.Len(t, out.R.SpecHistory, 2, "%s: the stored history, not the planned generation", name)
		require.Equal(t, 3, out.R.SpecDiff.To, name)
		type change struct{ Path, Before, After string }
		var changes []change
		for _, c := range out.R.SpecDiff.Spec {
			changes = append(changes, change{c.Path, string(c.Before), string(c.After)})
		}
		want := map[string][]change{"apply": {{"/size", "1", "3"}}, "rollback": nil}[name]
		require.Empty(t, cmp.Diff(want, changes), name)
	}
}
