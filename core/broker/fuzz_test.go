package broker

import (
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/workerproto/composecols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// FuzzWorkerMessages feeds arbitrary bytes to what the broker does with a
// worker's message: decode it, check a completion's lease secret, parse its
// task id and build the result a redelivery would write. Nothing panics,
// and no input forges a secret.
func FuzzWorkerMessages(f *testing.F) {
	leases := newLeaseKeys(nil)
	id := taskID{key: pipeline.TaskKey{ShardID: 3, ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile, OpID: uuid.New()},
		epoch: 7, generation: 2, stage: "STAGE_WORK", final: true, finalizer: "a/b c"}.String()
	seed := func(m *workerv1.WorkStreamRequest) {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Complete{Complete: &workerv1.StageComplete{
		TaskId: id, LeaseSecret: leases.issue("h", id), Fence: &workerv1.Fence{ClaimEpoch: 7},
		Result: &workerv1.StageComplete_Outcome{Outcome: &workerv1.Outcome{StatusJson: []byte(`{"a":1}`)}}}}})
	seed(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: &workerv1.Subscribe{WorkerId: "w",
		Kinds: []*workerv1.KindReadiness{{Kind: &workerv1.KindVersion{Kind: "k", Version: "v1"}, Ready: true}}}}})
	seed(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Heartbeat{Heartbeat: &workerv1.Heartbeat{}}})
	seed(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Completes{Completes: &workerv1.StageCompletes{
		Completes: []*workerv1.StageComplete{
			{TaskId: id, LeaseSecret: leases.issue("h", id), Result: &workerv1.StageComplete_Error{Error: &workerv1.TaskError{Message: "x"}}},
			{TaskId: "not-a-task-id", LeaseSecret: "forged"},
		}}}})
	cb := composecols.NewBuilder(2, 1)
	cb.Child("account", "", "a", map[string]string{"team": "t0"}, []byte(`{}`), "")
	cb.Child("vpc", "v2", "v", nil, nil, "eu")
	cb.Edge(composecols.Ref{Kind: "vpc", Name: "v"}, composecols.Ref{Kind: "account", Name: "a"}, []composecols.Flow{{Src: "/x", Dep: "/y"}})
	cols, _ := cb.Finish()
	seed(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Complete{Complete: &workerv1.StageComplete{
		TaskId: id, Result: &workerv1.StageComplete_Outcome{Outcome: &workerv1.Outcome{Composition: cols}}}}})
	f.Add([]byte{0x1a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		var m workerv1.WorkStreamRequest
		if proto.Unmarshal(b, &m) != nil {
			return
		}
		readyMap(m.GetSubscribe().GetKinds())
		readyMap(m.GetReadiness().GetKinds())
		for _, c := range append([]*workerv1.StageComplete{m.GetComplete()}, m.GetCompletes().GetCompletes()...) {
			checkCompletion(t, leases, c)
		}
	})
}

// checkCompletion is what the broker does with one completion, alone or
// from a batch.
func checkCompletion(t *testing.T, leases *leaseKeys, c *workerv1.StageComplete) {
	if c == nil {
		return
	}
	if c.GetLeaseSecret() != "" && leases.verify("rogue", c.GetTaskId(), c.GetLeaseSecret()) {
		t.Fatalf("a secret never issued to this holder verified: %q", c.GetLeaseSecret())
	}
	tid, err := parseTaskID(c.GetTaskId())
	if err != nil {
		return
	}
	if back, err := parseTaskID(tid.String()); err != nil || back != tid {
		t.Fatalf("task id %q does not round-trip: %v", c.GetTaskId(), err)
	}
	res := redelivered(tid, c)
	_ = res.Validate()
	// The live path: a stage's outcome applied to the task's result.
	live := pipeline.Result{Key: tid.key}
	apply(&live, manifest.Mask(manifest.OutcomeStatus, manifest.OutcomeConditions), c.GetOutcome())
	_ = live.Validate()
	// A composer's outcome read into the store's terms, lists or columns.
	_, _ = composition(manifest.Mask(manifest.OutcomeChildren, manifest.OutcomeEdges, manifest.OutcomeConfigs), c.GetOutcome())
}

// BenchmarkLeaseSecret is the per-dispatch cost of a lease secret: one
// issue and one verify.
func BenchmarkLeaseSecret(b *testing.B) {
	leases := newLeaseKeys(nil)
	id := taskID{key: pipeline.TaskKey{ShardID: 3, ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile, OpID: uuid.New()},
		epoch: 7, generation: 2, stage: "STAGE_WORK", final: true}.String()
	for b.Loop() {
		if !leases.verify("token/worker/w1", id, leases.issue("token/worker/w1", id)) {
			b.Fatal("a secret failed to verify")
		}
	}
}
