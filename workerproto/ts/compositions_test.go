package ts_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/converge-run/converge/workerproto/composecols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// The TS SDK's Outcome as JSON (workerproto/ts/src/provider.ts).
type (
	tsRef struct {
		Kind string `json:"kind"`
		Name string `json:"name"`
	}
	tsFlow struct {
		SrcField string `json:"srcField"`
		DepField string `json:"depField"`
	}
	tsChild struct {
		Kind              string            `json:"kind"`
		Version           string            `json:"version,omitempty"`
		Name              string            `json:"name"`
		Labels            map[string]string `json:"labels,omitempty"`
		Spec              json.RawMessage   `json:"spec,omitempty"`
		ProviderConfigRef string            `json:"providerConfigRef,omitempty"`
	}
	tsEdge struct {
		Dependent  tsRef    `json:"dependent"`
		Dependency tsRef    `json:"dependency"`
		ValueFlows []tsFlow `json:"valueFlows,omitempty"`
	}
	tsOutcome struct {
		Children []tsChild `json:"children"`
		Edges    []tsEdge  `json:"edges,omitempty"`
	}
)

// goColumns is what the Go writer (composecols.Builder, as the Go SDK
// feeds it) makes of o.
func goColumns(o tsOutcome) (*workerv1.CompositionColumns, bool) {
	b := composecols.NewBuilder(len(o.Children), len(o.Edges))
	for _, c := range o.Children {
		b.Child(c.Kind, c.Version, c.Name, c.Labels, c.Spec, c.ProviderConfigRef)
	}
	for _, e := range o.Edges {
		var flows []composecols.Flow
		for _, f := range e.ValueFlows {
			flows = append(flows, composecols.Flow{Src: f.SrcField, Dep: f.DepField})
		}
		b.Edge(composecols.Ref(e.Dependent), composecols.Ref(e.Dependency), flows)
	}
	return b.Finish()
}

// goLists is o as children and edges lists.
func goLists(o tsOutcome) ([]*workerv1.Child, []*workerv1.Edge) {
	var children []*workerv1.Child
	for _, c := range o.Children {
		children = append(children, &workerv1.Child{Kind: c.Kind, Version: c.Version, Name: c.Name, Labels: c.Labels,
			SpecJson: c.Spec, ProviderConfigRef: c.ProviderConfigRef})
	}
	var edges []*workerv1.Edge
	for _, e := range o.Edges {
		pe := &workerv1.Edge{DependentKind: e.Dependent.Kind, DependentName: e.Dependent.Name,
			DependencyKind: e.Dependency.Kind, DependencyName: e.Dependency.Name}
		for _, f := range e.ValueFlows {
			pe.ValueFlows = append(pe.ValueFlows, &workerv1.ValueFlow{SrcField: f.SrcField, DepField: f.DepField})
		}
		edges = append(edges, pe)
	}
	return children, edges
}

// TestTSSDK_WritesCompositionsAsTheGoBuilder holds the TypeScript SDK's
// writer of a composition's columns to the Go one (workerproto/composecols):
// the columns a TS handler's outcome is sent with are exactly those the Go
// Builder writes for the same composition, the Go reader spells them out as
// the lists, and a composition columns cannot carry goes as those lists.
func TestTSSDK_WritesCompositionsAsTheGoBuilder(t *testing.T) {
	t.Parallel()
	build(t)
	team := map[string]string{"bom": "b1", "team": "t0"}
	account := []tsFlow{{"/account_id", "/account_id"}}
	// Two kinds and a versioned one, equal labels one after the other (a
	// JSON document cannot share one object), a child without labels and
	// one with an empty spec, a config ref on one child only, names of
	// several bytes a character, edges to children (before and after them)
	// and to resources outside, with shared, distinct and no value flows.
	fits := tsOutcome{
		Children: []tsChild{
			{Kind: "account", Name: "b1-t0-account", Labels: team, Spec: json.RawMessage(`{"team":"t0"}`)},
			{Kind: "vpc", Version: "v2", Name: "b1-t0-vpc", Labels: team, Spec: json.RawMessage(`{"cidr":"10.0.0.0/24"}`), ProviderConfigRef: "eu"},
			{Kind: "route", Name: "café-0", Labels: map[string]string{"bom": "b1", "team": "t1"}, Spec: json.RawMessage(`{"d":0}`)},
			{Kind: "route", Name: "日本-🚀", Labels: map[string]string{"bom": "b1", "team": "t1"}},
			{Kind: "route", Name: "b1-t0-route-2", Spec: json.RawMessage(`{}`)},
		},
		Edges: []tsEdge{
			{tsRef{"vpc", "b1-t0-vpc"}, tsRef{"account", "b1-t0-account"}, account},
			{tsRef{"route", "café-0"}, tsRef{"vpc", "b1-t0-vpc"}, []tsFlow{{"/vpc_id", "/vpc_id"}}},
			{tsRef{"route", "日本-🚀"}, tsRef{"vpc", "b1-t0-vpc"}, []tsFlow{{"/vpc_id", "/vpc_id"}}},
			{tsRef{"account", "b1-t0-account"}, tsRef{"network", "shared"}, nil},
			{tsRef{"route", "b1-t0-route-2"}, tsRef{"network", "shared"}, []tsFlow{{"/a", "/a"}, {"/b", "/c"}}},
			{tsRef{"route", "b1-t0-route-2"}, tsRef{"subnet", "b1-t0-vpc"}, account},
		},
	}
	dupes := tsOutcome{Children: []tsChild{{Kind: "route", Name: "r", Spec: json.RawMessage(`{"n":1}`)}, {Kind: "route", Name: "r"}}}
	stranger := tsOutcome{
		Children: []tsChild{{Kind: "route", Name: "r"}},
		Edges:    []tsEdge{{tsRef{"route", "elsewhere"}, tsRef{"route", "r"}, account}},
	}
	cases := []struct {
		reason string
		in     tsOutcome
	}{
		{"a composition that fits columns", fits},
		{"two children share a (kind, name)", dupes},
		{"an edge's dependent is not a child", stranger},
	}

	in := make([]tsOutcome, 0, len(cases))
	for _, c := range cases {
		in = append(in, c.in)
	}
	stdin, err := json.Marshal(in)
	require.NoError(t, err)
	cmd := exec.Command("node", "dist/test/writecompositions.js")
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.Output()
	require.NoError(t, err)
	var got []struct{ Outcome, Error string }
	require.NoError(t, json.Unmarshal(out, &got))
	require.Len(t, got, len(cases))

	for i, c := range cases {
		require.Empty(t, got[i].Error, c.reason)
		wire, err := base64.StdEncoding.DecodeString(got[i].Outcome)
		require.NoError(t, err, c.reason)
		o := &workerv1.Outcome{}
		require.NoError(t, proto.Unmarshal(wire, o), c.reason)
		wantChildren, wantEdges := goLists(c.in)
		want, ok := goColumns(c.in)
		if !ok {
			require.Nil(t, o.GetComposition(), "%s: the Go writer refuses it, so the TS one sends lists", c.reason)
			require.Empty(t, cmp.Diff(&workerv1.Outcome{Children: wantChildren, Edges: wantEdges}, o, protocmp.Transform()), c.reason)
			continue
		}
		require.Empty(t, o.GetChildren(), "%s: never both forms", c.reason)
		require.Empty(t, o.GetEdges(), "%s: never both forms", c.reason)
		if diff := cmp.Diff(want, o.GetComposition(), protocmp.Transform()); diff != "" {
			t.Errorf("%s: the TS writer's columns differ from the Go one's (-go +ts):\n%s", c.reason, diff)
		}
		children, edges, err := composecols.Spell(o.GetComposition())
		require.NoError(t, err, c.reason)
		require.Empty(t, cmp.Diff(&workerv1.Outcome{Children: wantChildren, Edges: wantEdges},
			&workerv1.Outcome{Children: children, Edges: edges}, protocmp.Transform()), "%s: the Go reader spells the TS columns as the lists", c.reason)
	}
}
