package broker

import (
	"context"
	"testing"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/workerproto/composecols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// bothForms is one composition as lists and as columns: a team's account
// and VPC sharing a labels map, a route with none and an empty spec, a
// config ref, edges to a child and to a resource outside (one named like a
// child, of another kind), and a providerconfig.
func bothForms(t *testing.T) (lists, cols *workerv1.Outcome) {
	t.Helper()
	labels := map[string]string{"bom": "b1", "team": "t0"}
	children := []*workerv1.Child{
		{Kind: "account", Name: "a", Labels: labels, SpecJson: []byte(`{"team":"t0"}`)},
		{Kind: "vpc", Version: "v2", Name: "v", Labels: labels, SpecJson: []byte(`{"cidr":"10.0.0.0/24"}`), ProviderConfigRef: "eu"},
		{Kind: "route", Name: "r"},
	}
	edges := []*workerv1.Edge{
		{DependentKind: "vpc", DependentName: "v", DependencyKind: "account", DependencyName: "a",
			ValueFlows: []*workerv1.ValueFlow{{SrcField: "/account_id", DepField: "/account_id"}}},
		{DependentKind: "route", DependentName: "r", DependencyKind: "vpc", DependencyName: "v",
			ValueFlows: []*workerv1.ValueFlow{{SrcField: "/vpc_id", DepField: "/vpc_id"}}},
		{DependentKind: "route", DependentName: "r", DependencyKind: "network", DependencyName: "a"},
	}
	configs := []*workerv1.ProviderConfig{{Kind: "vpc", Name: "eu", SpecJson: []byte(`{"region":"eu"}`)}}
	b := composecols.NewBuilder(len(children), len(edges))
	for _, c := range children {
		b.Child(c.GetKind(), c.GetVersion(), c.GetName(), c.GetLabels(), c.GetSpecJson(), c.GetProviderConfigRef())
	}
	for _, e := range edges {
		var flows []composecols.Flow
		for _, f := range e.GetValueFlows() {
			flows = append(flows, composecols.Flow{Src: f.GetSrcField(), Dep: f.GetDepField()})
		}
		b.Edge(composecols.Ref{Kind: e.GetDependentKind(), Name: e.GetDependentName()},
			composecols.Ref{Kind: e.GetDependencyKind(), Name: e.GetDependencyName()}, flows)
	}
	c, ok := b.Finish()
	require.True(t, ok)
	return &workerv1.Outcome{Children: children, Edges: edges, Configs: configs},
		&workerv1.Outcome{Composition: c, Configs: configs}
}

// A composition reads the same into the store's terms from lists and from
// columns, for every set of parts a reaction may emit.
func TestComposition_ColumnsReadAsTheLists(t *testing.T) {
	t.Parallel()
	lists, cols := bothForms(t)
	all := manifest.Mask(manifest.OutcomeChildren, manifest.OutcomeEdges, manifest.OutcomeConfigs)
	want, err := composition(all, lists)
	require.NoError(t, err)
	require.Len(t, want.Children, 3)
	require.Equal(t, pipeline.Ref{Child: "v"}, want.Edges[1].Dependency)
	require.Equal(t, pipeline.Ref{Kind: "network", Name: "a"}, want.Edges[2].Dependency, "outside: named like a child, of another kind")
	require.Len(t, want.Configs, 1)
	for _, emits := range []manifest.OutcomeMask{
		all,
		manifest.Mask(manifest.OutcomeChildren),
		manifest.Mask(manifest.OutcomeEdges),
		manifest.Mask(manifest.OutcomeConfigs),
		manifest.Mask(),
	} {
		fromLists, err := composition(emits, lists)
		require.NoError(t, err)
		fromCols, err := composition(emits, cols)
		require.NoError(t, err)
		require.Equal(t, fromLists, fromCols, "emits %v", emits)
	}
}

// A composition sent both ways, or in columns that do not read, is refused
// with what is wrong, and nothing is read.
func TestComposition_RefusesDoubledOrMalformedColumns(t *testing.T) {
	t.Parallel()
	lists, cols := bothForms(t)
	all := manifest.Mask(manifest.OutcomeChildren, manifest.OutcomeEdges, manifest.OutcomeConfigs)
	doubled := &workerv1.Outcome{Children: lists.GetChildren(), Composition: cols.GetComposition()}
	_, err := composition(all, doubled)
	require.ErrorContains(t, err, "both as columns and as children or edges lists")

	cols.GetComposition().EdgeDependents[0] = 9
	c, err := composition(all, cols)
	require.ErrorContains(t, err, "composition columns: edge_dependents[0] is 9, past the 3 entries of children")
	require.Empty(t, c.Children)
	require.Empty(t, c.Edges)
}

// A relayed stage's composition goes back in columns to a peer that takes
// them, and spelled out as lists to one that did not say so (it would read
// columns it does not know as an empty composition and prune every child).
// Columns that do not spell out go back as the terminal failure they are.
func TestRelayStage_ReturnsACompositionInTheFormThePeerTakes(t *testing.T) {
	t.Parallel()
	lists, cols := bothForms(t)
	reply := cols
	svc := &workerService{id: "broker-2", reg: newRegistry(testLog(t)), leases: newLeaseKeys(nil), metrics: metrics.New(), log: testLog(t),
		stages: &fakeStages{DispatchLocalFn: func(_ context.Context, _ manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error) {
			return &workerv1.StageComplete{TaskId: task.GetTaskId(), Result: &workerv1.StageComplete_Outcome{Outcome: reply}}, nil
		}}}
	svc.reg.add(&session{id: "w#1", maxIn: 4, ready: map[manifest.KindVersion]bool{kvVPC: true}, done: make(chan struct{})})
	relay := func(compact bool) *workerv1.StageComplete {
		t.Helper()
		res, err := svc.RelayStage(context.Background(), connect.NewRequest(&workerv1.RelayStageRequest{OriginBroker: "broker-1",
			CompactCompositions: compact,
			Task:                &workerv1.StageTask{TaskId: "t", Resource: &workerv1.Resource{Id: "r", Kind: "vpc", Version: "v1"}}}))
		require.NoError(t, err)
		return res.Msg.GetComplete()
	}
	require.Same(t, cols, relay(true).GetOutcome(), "columns as the worker sent them")
	got := relay(false).GetOutcome()
	require.Nil(t, got.GetComposition())
	require.Empty(t, cmp.Diff(lists, got, protocmp.Transform()))
	require.NotNil(t, cols.GetComposition(), "the worker's completion is not changed")

	cols.GetComposition().NameLengths = nil
	bad := relay(false)
	require.True(t, bad.GetError().GetTerminal())
	require.Contains(t, bad.GetError().GetMessage(), "composition columns: name_lengths has 0 entries for 3 children")
}
