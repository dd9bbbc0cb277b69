package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/config"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/transport"
	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

const leafKind = `{"kind":"leaf","spec_schema":{"type":"object"},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status","conditions"]},
              {"name":"teardown","trigger":"deleteRequested","emits":["finalizer"]},
              {"name":"ping","trigger":"operation","verb":"ping","emits":["operationOutput"]}],
 "finalizer_name":"test.converge.dev/leaf"}`

const netKind = `{"kind":"net","spec_schema":{"type":"object","properties":{"spokes":{"type":"integer","minimum":0}},"required":["spokes"]},
 "reactions":[{"name":"compose","trigger":"specChange","emits":["children","edges","status"]},
              {"name":"rollup","trigger":"childrenSettled","emits":["status"]}]}`

// leafWork echoes its spec into its status and stamps an id.
func leafWork(_ context.Context, r worker.Request) (worker.Outcome, error) {
	switch r.Stage {
	case worker.StageOperate:
		return worker.Outcome{OperationOutput: js(map[string]any{"pong": r.Resource.Name, "input": r.Operation.Input})}, nil
	case worker.StageDelete:
		return worker.Outcome{}, nil
	}
	var spec map[string]any
	_ = json.Unmarshal(r.Resource.Spec, &spec)
	return worker.Outcome{Status: js(map[string]any{"id": "id-" + r.Resource.Name, "spec": spec})}, nil
}

// netCompose fans a net out into one hub and N spokes that wait on the hub
// and take its id through a value flow; the rollup counts ready children.
func netCompose(_ context.Context, r worker.Request) (worker.Outcome, error) {
	switch r.Stage {
	case worker.StageRollup:
		ready := 0
		for _, c := range r.Children {
			if c.Phase == string(resource.PhaseReady) {
				ready++
			}
		}
		return worker.Outcome{Status: js(map[string]any{"children": len(r.Children), "ready": ready})}, nil
	case worker.StageCompose:
		var spec struct{ Spokes int }
		if err := json.Unmarshal(r.Resource.Spec, &spec); err != nil {
			return worker.Outcome{}, worker.Terminal(err)
		}
		hub := r.Resource.Name + "-hub"
		out := worker.Outcome{Status: js(map[string]any{"phase": "composed"}),
			Children: []worker.Child{{Kind: "leaf", Name: hub, Spec: js(map[string]any{"role": "hub"})}}}
		for i := range spec.Spokes {
			name := fmt.Sprintf("%s-spoke-%d", r.Resource.Name, i)
			out.Children = append(out.Children, worker.Child{Kind: "leaf", Name: name, Spec: js(map[string]any{"role": "spoke"})})
			out.Edges = append(out.Edges, worker.Edge{Dependent: worker.Ref{Kind: "leaf", Name: name}, Dependency: worker.Ref{Kind: "leaf", Name: hub},
				ValueFlows: []worker.ValueFlow{{SrcField: "/id", DepField: "/hub_id"}}})
		}
		return out, nil
	}
	return worker.Outcome{}, fmt.Errorf("net: unexpected stage %s", r.Stage)
}

func TestRuntime_CompositeWithEdgesAndValueFlowsRollsUpReady(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, leafKind)
	applyManifest(t, p.Store, netKind)
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{MaxParallel: 32}, apptest.NewProvider("leaf", leafWork), apptest.NewProvider("net", netCompose))

	applyResource(t, p.Store, "net", "mesh", `{"spokes": 99}`)
	root := apptest.WaitPhase(t, p.Store, "net", "mesh", resource.PhaseReady, 90*time.Second)
	require.Equal(t, map[string]any{"children": float64(100), "ready": float64(100)}, status(t, root),
		"the rollup ran once every child was ready")

	spoke, err := p.Store.GetResource(context.Background(), "leaf", "mesh-spoke-42")
	require.NoError(t, err)
	var spec map[string]any
	require.NoError(t, json.Unmarshal(spoke.Spec, &spec))
	require.Equal(t, "id-mesh-hub", spec["hub_id"], "the hub's status flowed into the spoke's spec")
	require.Equal(t, root.ID, *spoke.OwnerID)
}

func TestRuntime_TerminalFailureStopsRetrying(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, leafKind)
	var calls atomic.Int32
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, apptest.NewProvider("leaf", func(context.Context, worker.Request) (worker.Outcome, error) {
		calls.Add(1)
		return worker.Outcome{}, worker.Terminal(errors.New("quota exceeded for good"))
	}))
	applyResource(t, p.Store, "leaf", "doomed", `{}`)
	r := apptest.WaitPhase(t, p.Store, "leaf", "doomed", resource.PhaseFailed, 30*time.Second)
	require.True(t, r.FailureTerminal)
	conds, err := p.Store.Conditions(context.Background(), r.ID)
	require.NoError(t, err)
	i := slices.IndexFunc(conds, func(c resource.Condition) bool { return c.Type == "Synced" })
	require.GreaterOrEqual(t, i, 0)
	require.Contains(t, conds[i].Message, "quota exceeded for good")

	// The reaper ticks every 200ms here: several ticks must not retry it.
	seen := calls.Load()
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		require.Equal(t, seen, calls.Load(), "a terminal failure is not retried")
		time.Sleep(100 * time.Millisecond)
	}
	require.EqualValues(t, 1, seen)
}

func TestRuntime_DeadlineIsATransientFailureThenRetried(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, `{"kind":"slow","task_deadline_secs":1,
	  "reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`)
	var calls atomic.Int32
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, apptest.NewProvider("slow", func(ctx context.Context, _ worker.Request) (worker.Outcome, error) {
		if calls.Add(1) == 1 {
			<-ctx.Done() // the first attempt hangs past the deadline
			return worker.Outcome{}, ctx.Err()
		}
		return worker.Outcome{Status: js(map[string]any{"attempt": 2})}, nil
	}))
	applyResource(t, p.Store, "slow", "s1", `{}`)
	apptest.WaitPhase(t, p.Store, "slow", "s1", resource.PhaseFailed, 30*time.Second)
	r := apptest.WaitPhase(t, p.Store, "slow", "s1", resource.PhaseReady, 60*time.Second)
	require.False(t, r.FailureTerminal)
	require.EqualValues(t, 2, calls.Load())
}

func TestRuntime_OperationVerbReturnsItsOutput(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, leafKind)
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, apptest.NewProvider("leaf", leafWork))
	applyResource(t, p.Store, "leaf", "target", `{}`)
	apptest.WaitPhase(t, p.Store, "leaf", "target", resource.PhaseReady, 30*time.Second)

	op, err := p.Store.RunOperation(context.Background(), "leaf", "target", "ping", json.RawMessage(`{"n":7}`), "test")
	require.NoError(t, err)
	deadline := time.Now().Add(30 * time.Second)
	for {
		op, err = p.Store.GetOperation(context.Background(), op.ID)
		require.NoError(t, err)
		if op.State.Final() || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, resource.OperationSucceeded, op.State, op.Error)
	require.JSONEq(t, `{"pong":"target","input":{"n":7}}`, string(op.Output))
}

func TestRuntime_UnreadyKindGetsNoWorkWhileOthersAreServed(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, leafKind)
	applyManifest(t, p.Store, `{"kind":"gated","reactions":[{"name":"work","trigger":"specChange","emits":["status"]}]}`)
	var gatedCalls atomic.Int32
	gated := apptest.NewProvider("gated", func(context.Context, worker.Request) (worker.Outcome, error) {
		gatedCalls.Add(1)
		return worker.Outcome{Status: js(map[string]any{"ok": true})}, nil
	})
	gated.SetReady(false)
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, apptest.NewProvider("leaf", leafWork), gated)

	applyResource(t, p.Store, "gated", "g1", `{}`)
	applyResource(t, p.Store, "leaf", "l1", `{}`)
	apptest.WaitPhase(t, p.Store, "leaf", "l1", resource.PhaseReady, 30*time.Second)
	r, err := p.Store.GetResource(context.Background(), "gated", "g1")
	require.NoError(t, err)
	require.Equal(t, resource.PhaseReconciling, r.Phase)
	require.Zero(t, gatedCalls.Load(), "an unready kind is sent no work")

	gated.SetReady(true)
	apptest.WaitPhase(t, p.Store, "gated", "g1", resource.PhaseReady, 30*time.Second)
}

func TestRuntime_DeletingACompositeTearsDownDependentsFirst(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, leafKind)
	applyManifest(t, p.Store, netKind)
	var mu sync.Mutex
	var order []string
	leaf := apptest.NewProvider("leaf", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
		if r.Stage == worker.StageDelete {
			mu.Lock()
			order = append(order, r.Resource.Name)
			mu.Unlock()
		}
		return leafWork(ctx, r)
	})
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, leaf, apptest.NewProvider("net", netCompose))
	applyResource(t, p.Store, "net", "tree", `{"spokes": 3}`)
	apptest.WaitPhase(t, p.Store, "net", "tree", resource.PhaseReady, 60*time.Second)

	_, err := p.Store.RequestDeletion(context.Background(), "net", "tree", "test")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := p.Store.GetResource(context.Background(), "net", "tree")
		return errors.Is(err, store.ErrNotFound)
	}, 60*time.Second, 20*time.Millisecond, "the root is removed last")
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, order, 4, "every leaf's finalizer ran once: %v", order)
	require.Equal(t, "tree-hub", order[3], "the hub (the spokes' dependency) is torn down after its dependents: %v", order)
}

func TestRuntime_BrokerSpeaksGRPC(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, leafKind)
	_, _, err := p.Store.ApplyProviderConfig(context.Background(), store.ProviderConfigInput{Kind: "leaf", Name: "default", IsDefault: true,
		Spec: json.RawMessage(`{"endpoint":"http://sink"}`)})
	require.NoError(t, err)
	hc, err := transport.ClientFor(apptest.BrokerURL(p), nil)
	require.NoError(t, err)
	client := workerv1connect.NewWorkerServiceClient(hc, apptest.BrokerURL(p), connect.WithGRPC(),
		connect.WithInterceptors(workerToken{}))
	res, err := client.GetProviderConfig(context.Background(), connect.NewRequest(&workerv1.GetProviderConfigRequest{Kind: "leaf"}))
	require.NoError(t, err)
	require.True(t, res.Msg.GetFound())
	require.JSONEq(t, `{"endpoint":"http://sink"}`, string(res.Msg.GetConfig().GetSpecJson()))

	_, err = client.GetProviderConfig(context.Background(), connect.NewRequest(&workerv1.GetProviderConfigRequest{}))
	require.Equal(t, connect.CodeInvalidArgument, connect.CodeOf(err))
}

func TestRuntime_ProbesAndMetrics(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	base := "http://" + p.Addr("api").String()
	for _, path := range []string{"/livez", "/healthz", "/readyz", "/metrics"} {
		res, err := http.Get(base + path)
		require.NoError(t, err, path)
		res.Body.Close()
		require.Equal(t, http.StatusOK, res.StatusCode, path)
	}
}

func TestRuntime_ReactorBindingDeliversTransitionsAtLeastOnce(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, leafKind)
	applyManifest(t, p.Store, `{"kind":"sink","config_schema":{"type":"object"},
	  "reactions":[{"name":"react","trigger":"reactor","emits":["sideEffect"]}]}`)
	_, _, err := p.Store.ApplyReactorBinding(context.Background(), store.ReactorBindingInput{
		Name: "leaf-synced-to-sink", WatchKind: "leaf", Transition: "synced", Reactor: "sink",
		LabelMatch: map[string]string{"team": "a"}})
	require.NoError(t, err)

	type got struct{ name, transition, token string }
	deliveries := make(chan got, 16)
	var attempts atomic.Int32
	sink := apptest.NewProvider("sink", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		if r.Stage != worker.StageReact {
			return worker.Outcome{}, fmt.Errorf("sink got stage %s", r.Stage)
		}
		if attempts.Add(1) == 1 {
			return worker.Outcome{}, errors.New("object store unavailable")
		}
		deliveries <- got{r.Resource.Name, string(r.React.Transition), r.React.DedupToken}
		return worker.Outcome{}, nil
	})
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, apptest.NewProvider("leaf", leafWork), sink)

	_, _, err = p.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "leaf", Name: "watched",
		Labels: map[string]string{"team": "a"}, Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)
	_, _, err = p.Store.ApplyResource(context.Background(), store.ApplyResourceInput{Kind: "leaf", Name: "ignored",
		Labels: map[string]string{"team": "b"}, Spec: json.RawMessage(`{}`)})
	require.NoError(t, err)
	apptest.WaitPhase(t, p.Store, "leaf", "ignored", resource.PhaseReady, 30*time.Second)

	select {
	case d := <-deliveries:
		require.Equal(t, "watched", d.name, "only the label-matching resource is delivered")
		require.Equal(t, "synced", d.transition)
		require.Contains(t, d.token, ":synced:1:leaf-synced-to-sink")
	case <-time.After(60 * time.Second):
		t.Fatal("the synced transition was not redelivered after the reactor failed")
	}
	require.GreaterOrEqual(t, attempts.Load(), int32(2), "the failed delivery was re-armed and retried")
	select {
	case d := <-deliveries:
		t.Fatalf("unexpected extra delivery %+v", d)
	case <-time.After(500 * time.Millisecond):
	}
}

func TestRuntime_MeshRelaysStagesToThePeerWithTheWorker(t *testing.T) {
	t.Parallel()
	o := options()
	o.Roles = []config.Role{config.RoleAll, config.RoleAll}
	s := apptest.Start(t, o)
	withWorker, without := s.Processes[0], s.Processes[1]
	applyManifest(t, withWorker.Store, leafKind)
	// Only the first pod has a worker; the second owns half the shards.
	apptest.StartWorker(t, apptest.BrokerURL(withWorker), worker.Options{}, apptest.NewProvider("leaf", leafWork))
	require.Eventually(t, func() bool {
		a, b := withWorker.Shards.Span(), without.Shards.Span()
		return !a.Empty() && !b.Empty() && a != b
	}, 30*time.Second, 20*time.Millisecond, "the two pods split the shards")

	const n = 40
	for i := range n {
		applyResource(t, withWorker.Store, "leaf", fmt.Sprintf("meshed-%d", i), `{}`)
	}
	relayed := 0
	for i := range n {
		r := apptest.WaitPhase(t, withWorker.Store, "leaf", fmt.Sprintf("meshed-%d", i), resource.PhaseReady, 60*time.Second)
		if sp := without.Shards.Span(); r.ShardID >= sp.Lo && r.ShardID < sp.Hi {
			relayed++
		}
	}
	require.Positive(t, relayed, "resources in the worker-less pod's range were reconciled through the mesh")
}

func TestRuntime_TerminallyFailedUpstreamFailsItsDependentsAndTheRootRollsUp(t *testing.T) {
	t.Parallel()
	p := startServer(t)
	applyManifest(t, p.Store, leafKind)
	applyManifest(t, p.Store, netKind)
	leaf := apptest.NewProvider("leaf", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
		if r.Stage == worker.StageWork && r.Resource.Name == "web-hub" {
			return worker.Outcome{}, worker.Terminal(errors.New("hub cidr overlaps"))
		}
		return leafWork(ctx, r)
	})
	apptest.StartWorker(t, apptest.BrokerURL(p), worker.Options{}, leaf, apptest.NewProvider("net", netCompose))
	applyResource(t, p.Store, "net", "web", `{"spokes": 3}`)

	spoke := apptest.WaitPhase(t, p.Store, "leaf", "web-spoke-1", resource.PhaseFailed, 60*time.Second)
	require.False(t, spoke.FailureTerminal, "a blocked dependent is not terminal: it retries once the upstream recovers")
	conds, err := p.Store.Conditions(context.Background(), spoke.ID)
	require.NoError(t, err)
	i := slices.IndexFunc(conds, func(c resource.Condition) bool { return c.Type == "Synced" })
	require.GreaterOrEqual(t, i, 0)
	require.Equal(t, "DependencyFailed", conds[i].Reason)

	root := apptest.WaitPhase(t, p.Store, "net", "web", resource.PhaseReady, 60*time.Second)
	require.Equal(t, map[string]any{"children": float64(4), "ready": float64(0)}, status(t, root),
		"the rollup ran over a subtree that failed instead of stalling")
}

// workerToken presents the harness's worker token on raw clients.
type workerToken struct{}

func (workerToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		req.Header().Set("Authorization", "Bearer "+apptest.WorkerToken)
		return next(ctx, req)
	}
}

func (workerToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (workerToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
