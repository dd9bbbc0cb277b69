package pipeline

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Children that share a labels map share its encoding, and children with
// equal labels in maps of their own each get theirs, the same bytes.
func TestPlanChildren_SharedLabelsAreEncodedOnce(t *testing.T) {
	t.Parallel()
	team := map[string]string{"team": "t0", "bom": "b"}
	st := &composeState{owned: map[childKey]ownedChild{}}
	plan, err := planChildren(st, []Child{
		{Kind: "account", Name: "a", Labels: team},
		{Kind: "vpc", Name: "v", Labels: team},
		{Kind: "route", Name: "r", Labels: map[string]string{"team": "t0", "bom": "b"}},
		{Kind: "route", Name: "s"},
		{Kind: "route", Name: "u", Labels: team},
	})
	require.NoError(t, err)
	l := func(i int) []byte { return plan.children[i].labels }
	require.JSONEq(t, `{"bom":"b","team":"t0"}`, string(l(0)))
	require.Same(t, &l(0)[0], &l(1)[0], "one map: one encoding")
	require.Equal(t, l(0), l(2))
	require.NotSame(t, &l(0)[0], &l(2)[0], "another map is encoded on its own")
	require.Equal(t, `{}`, string(l(3)))
	require.Equal(t, l(0), l(4), "a map seen again after another encodes the same")
}

// Edges that share a list of value flows share its encoding; a list that
// starts at the same element but is shorter is another list.
func TestEncodeFlows_SharedListsAreEncodedOnce(t *testing.T) {
	t.Parallel()
	flows := []ValueFlow{{SrcField: "/a", DepField: "/b"}, {SrcField: "/c", DepField: "/d"}}
	encoded := map[flowList][]byte{}
	first := encodeFlows(flows, encoded)
	require.JSONEq(t, `[{"src_field":"/a","dep_field":"/b"},{"src_field":"/c","dep_field":"/d"}]`, string(first))
	require.Same(t, &first[0], &encodeFlows(flows, encoded)[0])
	require.JSONEq(t, `[{"src_field":"/a","dep_field":"/b"}]`, string(encodeFlows(flows[:1], encoded)))
	require.Equal(t, `[]`, string(encodeFlows(nil, encoded)))
	require.Equal(t, `[]`, string(encodeFlows([]ValueFlow{}, encoded)))
}
