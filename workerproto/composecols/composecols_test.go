package composecols_test

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/converge-run/converge/workerproto/composecols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

type child struct {
	kind, version, name string
	labels              map[string]string
	spec                []byte
	configRef           string
}

type edge struct {
	dependent, dependency composecols.Ref
	flows                 []composecols.Flow
}

// composition has what columns must carry: two kinds and a versioned one,
// children sharing a labels map and children with equal labels in maps of
// their own, a child without labels and one with an empty spec, a config
// ref on one child only, edges to children (before and after them) and to
// a resource outside, with shared, distinct and no value flows.
func composition() ([]child, []edge) {
	team := map[string]string{"bom": "b1", "team": "t0"}
	flowsA := []composecols.Flow{{Src: "/account_id", Dep: "/account_id"}}
	children := []child{
		{kind: "account", name: "b1-t0-account", labels: team, spec: []byte(`{"team":"t0"}`)},
		{kind: "vpc", version: "v2", name: "b1-t0-vpc", labels: team, spec: []byte(`{"cidr":"10.0.0.0/24"}`), configRef: "eu"},
		{kind: "route", name: "b1-t0-route-0", labels: map[string]string{"bom": "b1", "team": "t1"}, spec: []byte(`{"d":0}`)},
		{kind: "route", name: "b1-t0-route-1", labels: map[string]string{"bom": "b1", "team": "t1"}},
		{kind: "route", name: "b1-t0-route-2", spec: []byte(`{}`)},
	}
	edges := []edge{
		{dependent: composecols.Ref{Kind: "vpc", Name: "b1-t0-vpc"}, dependency: composecols.Ref{Kind: "account", Name: "b1-t0-account"}, flows: flowsA},
		{dependent: composecols.Ref{Kind: "route", Name: "b1-t0-route-0"}, dependency: composecols.Ref{Kind: "vpc", Name: "b1-t0-vpc"},
			flows: []composecols.Flow{{Src: "/vpc_id", Dep: "/vpc_id"}}},
		{dependent: composecols.Ref{Kind: "route", Name: "b1-t0-route-1"}, dependency: composecols.Ref{Kind: "vpc", Name: "b1-t0-vpc"},
			flows: []composecols.Flow{{Src: "/vpc_id", Dep: "/vpc_id"}}},
		{dependent: composecols.Ref{Kind: "account", Name: "b1-t0-account"}, dependency: composecols.Ref{Kind: "network", Name: "shared"}},
		{dependent: composecols.Ref{Kind: "route", Name: "b1-t0-route-2"}, dependency: composecols.Ref{Kind: "network", Name: "shared"},
			flows: []composecols.Flow{{Src: "/a", Dep: "/a"}, {Src: "/b", Dep: "/c"}}},
		// A dependency of the same name as a child but another kind is a
		// resource outside the composition.
		{dependent: composecols.Ref{Kind: "route", Name: "b1-t0-route-2"}, dependency: composecols.Ref{Kind: "subnet", Name: "b1-t0-vpc"}, flows: flowsA},
	}
	return children, edges
}

func build(children []child, edges []edge) (*workerv1.CompositionColumns, bool) {
	b := composecols.NewBuilder(len(children), len(edges))
	// Edges first for one of them: an edge may come before its children.
	b.Edge(edges[0].dependent, edges[0].dependency, edges[0].flows)
	for _, c := range children {
		b.Child(c.kind, c.version, c.name, c.labels, c.spec, c.configRef)
	}
	for _, e := range edges[1:] {
		b.Edge(e.dependent, e.dependency, e.flows)
	}
	return b.Finish()
}

// lists is the composition as a worker sends it to a broker that does not
// take columns.
func lists(children []child, edges []edge) ([]*workerv1.Child, []*workerv1.Edge) {
	var pc []*workerv1.Child
	for _, c := range children {
		var spec []byte
		if len(c.spec) > 0 {
			spec = c.spec
		}
		pc = append(pc, &workerv1.Child{Kind: c.kind, Version: c.version, Name: c.name, Labels: c.labels, SpecJson: spec, ProviderConfigRef: c.configRef})
	}
	var pe []*workerv1.Edge
	for _, e := range edges {
		x := &workerv1.Edge{DependentKind: e.dependent.Kind, DependentName: e.dependent.Name,
			DependencyKind: e.dependency.Kind, DependencyName: e.dependency.Name}
		for _, f := range e.flows {
			x.ValueFlows = append(x.ValueFlows, &workerv1.ValueFlow{SrcField: f.Src, DepField: f.Dep})
		}
		pe = append(pe, x)
	}
	return pc, pe
}

func overTheWire(t *testing.T, cols *workerv1.CompositionColumns) *workerv1.CompositionColumns {
	t.Helper()
	wire, err := proto.Marshal(cols)
	require.NoError(t, err)
	back := &workerv1.CompositionColumns{}
	require.NoError(t, proto.Unmarshal(wire, back))
	return back
}

// The columns read back, after a trip over the wire, as the composition
// that went in: child by child and edge by edge, with children that share
// a label set sharing one map and edges resolved to children or outside.
func TestWalk_ReadsBackWhatWasBuilt(t *testing.T) {
	t.Parallel()
	children, edges := composition()
	cols, ok := build(children, edges)
	require.True(t, ok)
	cols = overTheWire(t, cols)

	var got []composecols.Child
	var gotEdges []composecols.Edge
	require.NoError(t, composecols.Walk(cols, func(i int, c composecols.Child) {
		require.Equal(t, len(got), i)
		got = append(got, c)
	}, func(e int, ed composecols.Edge) {
		require.Equal(t, len(gotEdges), e)
		gotEdges = append(gotEdges, ed)
	}))
	require.Len(t, got, len(children))
	for i, c := range children {
		require.Equal(t, c.kind, got[i].Kind, "child %d", i)
		require.Equal(t, c.version, got[i].Version, "child %d", i)
		require.Equal(t, c.name, got[i].Name, "child %d", i)
		require.Equal(t, c.configRef, got[i].ConfigRef, "child %d", i)
		if len(c.spec) == 0 {
			require.Nil(t, got[i].Spec, "child %d: an empty spec reads as none", i)
		} else {
			require.Equal(t, c.spec, got[i].Spec, "child %d", i)
			require.Equal(t, len(got[i].Spec), cap(got[i].Spec), "child %d: a spec cannot be appended into its neighbour", i)
		}
		if len(c.labels) == 0 {
			require.Nil(t, got[i].Labels, "child %d", i)
		} else {
			require.Equal(t, c.labels, got[i].Labels, "child %d", i)
		}
	}
	same := func(a, b map[string]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	require.True(t, same(got[0].Labels, got[1].Labels), "one labels map in: one set out")
	require.True(t, same(got[2].Labels, got[3].Labels), "equal labels one after the other: one set")
	require.Len(t, cols.GetLabelSets(), 2)

	flowSets := composecols.FlowSets(cols)
	require.Len(t, flowSets, 3, "three distinct lists of flows")
	require.Len(t, gotEdges, len(edges))
	for e, want := range edges {
		ed := gotEdges[e]
		require.Equal(t, want.dependent.Name, ed.DependentName, "edge %d", e)
		require.Equal(t, want.dependent.Name, got[ed.Dependent].Name, "edge %d", e)
		if ed.Dependency >= 0 {
			require.Equal(t, want.dependency, composecols.Ref{Kind: got[ed.Dependency].Kind, Name: got[ed.Dependency].Name}, "edge %d", e)
			require.Equal(t, want.dependency.Name, ed.DependencyName, "edge %d", e)
		} else {
			require.Equal(t, want.dependency, ed.External, "edge %d", e)
		}
		if len(want.flows) == 0 {
			require.Equal(t, -1, ed.FlowSet, "edge %d", e)
		} else {
			require.Equal(t, want.flows, flowSets[ed.FlowSet], "edge %d", e)
		}
	}
	require.Equal(t, -1, gotEdges[5].Dependency, "a dependency named like a child but of another kind is outside")
	require.Len(t, cols.GetExternalDependencies(), 2, "each outside resource is listed once")
}

// Spelled out, the columns are exactly the lists the worker would have
// sent a broker that does not take columns.
func TestSpell_IsTheListsForm(t *testing.T) {
	t.Parallel()
	children, edges := composition()
	cols, ok := build(children, edges)
	require.True(t, ok)
	gotC, gotE, err := composecols.Spell(overTheWire(t, cols))
	require.NoError(t, err)
	wantC, wantE := lists(children, edges)
	require.Empty(t, cmpDiff(&workerv1.Outcome{Children: wantC, Edges: wantE}, &workerv1.Outcome{Children: gotC, Edges: gotE}))
}

// Spelled leaves a completion without columns alone, and copies one with
// them: the original keeps its columns for a later peer that takes them.
func TestSpelled_CopiesAndLeavesTheOriginal(t *testing.T) {
	t.Parallel()
	plain := &workerv1.StageComplete{TaskId: "t", Result: &workerv1.StageComplete_Outcome{Outcome: &workerv1.Outcome{StatusJson: []byte(`{}`)}}}
	s, err := composecols.Spelled(plain)
	require.NoError(t, err)
	require.Same(t, plain, s)

	children, edges := composition()
	cols, ok := build(children, edges)
	require.True(t, ok)
	c := &workerv1.StageComplete{TaskId: "t", LeaseSecret: "s", Result: &workerv1.StageComplete_Outcome{Outcome: &workerv1.Outcome{
		StatusJson: []byte(`{"phase":"composed"}`), Composition: cols}}}
	s, err = composecols.Spelled(c)
	require.NoError(t, err)
	require.NotSame(t, c, s)
	require.NotNil(t, c.GetOutcome().GetComposition(), "the original keeps its columns")
	require.Nil(t, s.GetOutcome().GetComposition())
	require.Equal(t, "s", s.GetLeaseSecret())
	require.Equal(t, `{"phase":"composed"}`, string(s.GetOutcome().GetStatusJson()))
	wantC, wantE := lists(children, edges)
	require.Empty(t, cmpDiff(&workerv1.Outcome{StatusJson: []byte(`{"phase":"composed"}`), Children: wantC, Edges: wantE}, s.GetOutcome()))

	c.GetOutcome().Composition.NameLengths = c.GetOutcome().GetComposition().GetNameLengths()[1:]
	_, err = composecols.Spelled(c)
	require.ErrorContains(t, err, "result of t: composition columns: name_lengths has 4 entries for 5 children")
}

// A composition columns cannot carry as sent goes as lists, so the broker
// refuses it exactly as it always has: two children of one kind and name,
// or an edge whose dependent is not a child.
func TestFinish_RefusesWhatColumnsCannotCarry(t *testing.T) {
	t.Parallel()
	b := composecols.NewBuilder(0, 0)
	b.Child("route", "", "r", nil, nil, "")
	b.Child("route", "", "r", nil, nil, "")
	_, ok := b.Finish()
	require.False(t, ok, "duplicate (kind, name)")

	b = composecols.NewBuilder(0, 0)
	b.Child("route", "", "r", nil, nil, "")
	b.Edge(composecols.Ref{Kind: "route", Name: "elsewhere"}, composecols.Ref{Kind: "route", Name: "r"}, nil)
	_, ok = b.Finish()
	require.False(t, ok, "dependent not a child")

	b = composecols.NewBuilder(0, 0)
	b.Child("route", "", "r", nil, nil, "")
	b.Edge(composecols.Ref{Name: "r"}, composecols.Ref{Kind: "x", Name: "y"}, nil)
	_, ok = b.Finish()
	require.False(t, ok, "dependent named without its kind: the lists carry it as sent")
}

// Every inconsistency is refused with the column named, before any child
// or edge is handed out.
func TestCheck_NamesTheBadColumn(t *testing.T) {
	t.Parallel()
	children, edges := composition()
	for _, tc := range []struct {
		name   string
		mangle func(c *workerv1.CompositionColumns)
		want   string
	}{
		{"name lengths short", func(c *workerv1.CompositionColumns) { c.NameLengths = c.NameLengths[1:] }, "name_lengths has 4 entries for 5 children"},
		{"spec lengths long", func(c *workerv1.CompositionColumns) { c.SpecLengths = append(c.SpecLengths, 0) }, "spec_lengths has 6 entries for 5 children"},
		{"label sets short", func(c *workerv1.CompositionColumns) { c.ChildLabelSets = c.ChildLabelSets[1:] }, "child_label_sets has 4 entries for 5 children (all or none)"},
		{"config refs short", func(c *workerv1.CompositionColumns) { c.ChildConfigRefs = c.ChildConfigRefs[1:] }, "child_config_refs has 4 entries for 5 children (all or none)"},
		{"dependencies short", func(c *workerv1.CompositionColumns) { c.EdgeDependencies = c.EdgeDependencies[1:] }, "edge_dependencies has 5 entries for 6 edges"},
		{"flow sets short", func(c *workerv1.CompositionColumns) { c.EdgeFlowSets = c.EdgeFlowSets[1:] }, "edge_flow_sets has 5 entries for 6 edges (all or none)"},
		{"names longer than lengths", func(c *workerv1.CompositionColumns) { c.Names += "x" }, "name_lengths add up to"},
		{"specs shorter than lengths", func(c *workerv1.CompositionColumns) { c.Specs = c.Specs[1:] }, "spec_lengths add up to"},
		{"length past names", func(c *workerv1.CompositionColumns) { c.NameLengths[0] = 1 << 31; c.NameLengths[1] = 1 << 31 }, "name_lengths add up to"},
		{"kind out of range", func(c *workerv1.CompositionColumns) { c.ChildKinds[2] = 9 }, "child_kinds[2] is 9, past the 3 entries of kinds"},
		{"label set out of range", func(c *workerv1.CompositionColumns) { c.ChildLabelSets[0] = 3 }, "child_label_sets[0] is 3, past the 3 entries of label_sets"},
		{"config ref out of range", func(c *workerv1.CompositionColumns) { c.ChildConfigRefs[4] = 2 }, "child_config_refs[4] is 2"},
		{"dependent out of range", func(c *workerv1.CompositionColumns) { c.EdgeDependents[1] = 5 }, "edge_dependents[1] is 5, past the 5 entries of children"},
		{"dependency out of range", func(c *workerv1.CompositionColumns) { c.EdgeDependencies[1] = 7 }, "edge_dependencies[1] is 7, past the 7 entries of children and external_dependencies"},
		{"flow set out of range", func(c *workerv1.CompositionColumns) { c.EdgeFlowSets[0] = 4 }, "edge_flow_sets[0] is 4, past the 4 entries of flow_sets"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cols, ok := build(children, edges)
			require.True(t, ok)
			tc.mangle(cols)
			called := 0
			err := composecols.Walk(cols, func(int, composecols.Child) { called++ }, func(int, composecols.Edge) { called++ })
			require.ErrorContains(t, err, "composition columns: "+tc.want)
			require.Zero(t, called)
		})
	}
}

// An empty composition (a composer that wants no children) is valid
// columns with nothing in them.
func TestWalk_Empty(t *testing.T) {
	t.Parallel()
	cols, ok := composecols.NewBuilder(0, 0).Finish()
	require.True(t, ok)
	n := 0
	require.NoError(t, composecols.Walk(overTheWire(t, cols), func(int, composecols.Child) { n++ }, func(int, composecols.Edge) { n++ }))
	require.Zero(t, n)
}

// Whatever bytes arrive, reading them never panics, and columns that pass
// the check yield one child per entry and one edge per entry, or nothing.
func FuzzWalk(f *testing.F) {
	children, edges := composition()
	cols, _ := build(children, edges)
	wire, err := proto.Marshal(cols)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(wire)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, wire []byte) {
		cols := &workerv1.CompositionColumns{}
		if proto.Unmarshal(wire, cols) != nil {
			return
		}
		nc, ne := 0, 0
		err := composecols.Walk(cols, func(int, composecols.Child) { nc++ }, func(int, composecols.Edge) { ne++ })
		if err != nil {
			if nc+ne != 0 {
				t.Fatalf("refused after handing out %d children and %d edges: %v", nc, ne, err)
			}
			return
		}
		if nc != composecols.Len(cols) || ne != composecols.Edges(cols) {
			t.Fatalf("walked %d children and %d edges of %d and %d", nc, ne, composecols.Len(cols), composecols.Edges(cols))
		}
		if _, _, err := composecols.Spell(cols); err != nil {
			t.Fatalf("walked but did not spell: %v", err)
		}
	})
}

func cmpDiff(want, got proto.Message) string { return cmp.Diff(want, got, protocmp.Transform()) }
