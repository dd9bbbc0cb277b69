package worker_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/workerproto/composecols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// composeTask is a compose stage for a bom named id.
func composeTask(id string, epoch int64) *workerv1.StageTask {
	t := task(id, "bom", epoch, 0)
	t.Stage, t.Reaction = workerv1.Stage_STAGE_COMPOSE, "compose"
	t.Request = &workerv1.StageTask_Compose{Compose: &workerv1.ComposeRequest{}}
	return t
}

// composer emits two teams' account and VPC, the team's children sharing a
// labels map, each VPC after its account with a value flow.
func composer() *fakeProvider {
	return newProvider("bom", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		out := worker.Outcome{Status: json.RawMessage(`{"phase":"composed"}`)}
		for _, team := range []string{"t0", "t1"} {
			labels := map[string]string{"bom": r.Resource.Name, "team": team}
			acct, vpc := r.Resource.Name+"-"+team+"-account", r.Resource.Name+"-"+team+"-vpc"
			out.Children = append(out.Children,
				worker.Child{Kind: "account", Name: acct, Labels: labels, Spec: json.RawMessage(`{"team":"` + team + `"}`)},
				worker.Child{Kind: "vpc", Name: vpc, Labels: labels, Spec: json.RawMessage(`{"cidr":"10.0.0.0/24"}`)})
			out.Edges = append(out.Edges, worker.Edge{Dependent: worker.Ref{Kind: "vpc", Name: vpc},
				Dependency: worker.Ref{Kind: "account", Name: acct}, ValueFlows: []worker.ValueFlow{{SrcField: "/account_id", DepField: "/account_id"}}})
		}
		return out, nil
	})
}

// wantLists is composer's output for bom b1 as children and edges lists.
func wantLists() *workerv1.Outcome {
	out := &workerv1.Outcome{StatusJson: []byte(`{"phase":"composed"}`)}
	for _, team := range []string{"t0", "t1"} {
		labels := map[string]string{"bom": "b1", "team": team}
		acct, vpc := "b1-"+team+"-account", "b1-"+team+"-vpc"
		out.Children = append(out.Children,
			&workerv1.Child{Kind: "account", Name: acct, Labels: labels, SpecJson: []byte(`{"team":"` + team + `"}`)},
			&workerv1.Child{Kind: "vpc", Name: vpc, Labels: labels, SpecJson: []byte(`{"cidr":"10.0.0.0/24"}`)})
		out.Edges = append(out.Edges, &workerv1.Edge{DependentKind: "vpc", DependentName: vpc, DependencyKind: "account", DependencyName: acct,
			ValueFlows: []*workerv1.ValueFlow{{SrcField: "/account_id", DepField: "/account_id"}}})
	}
	return out
}

// A composition goes to a broker that takes columns as columns, and to one
// that does not as lists; a result first sent as lists and not acked keeps
// its columns, and its redelivery to a broker that takes them carries them.
func TestServe_SendsACompositionInTheFormTheBrokerTakes(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.acks = true // a sent result stays pending until acked: the redelivery below
	startWorker(t, b, worker.Options{}, composer())
	b.next(t, "subscribe", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil })

	b.send(composeTask("b1", 3))
	lists := b.next(t, "completion as lists", isComplete("b1")).GetComplete().GetOutcome()
	require.Nil(t, lists.GetComposition(), "no columns for a broker that did not ask for them")
	require.Empty(t, cmp.Diff(wantLists(), lists, protocmp.Transform()))

	b.mu.Lock()
	b.compositions = true
	b.mu.Unlock()
	b.killStream() // unacked: the result goes again on the next session
	b.next(t, "re-subscribe", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil })
	again := b.next(t, "redelivered completion", isComplete("b1")).GetComplete().GetOutcome()
	require.NotNil(t, again.GetComposition(), "columns for a broker that takes them")
	require.Empty(t, again.GetChildren())
	require.Empty(t, again.GetEdges())
	require.Len(t, again.GetComposition().GetLabelSets(), 2, "a team's children share one label set")
	require.Len(t, again.GetComposition().GetFlowSets(), 1, "the edges share one list of flows")
	children, edges, err := composecols.Spell(again.GetComposition())
	require.NoError(t, err)
	require.Empty(t, cmp.Diff(wantLists(), &workerv1.Outcome{StatusJson: again.GetStatusJson(), Children: children, Edges: edges}, protocmp.Transform()))
}
