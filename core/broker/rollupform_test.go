package broker

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/workerproto/childcols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// A rollup goes out as columns to a worker that asked for them and spelled
// out as one ChildSummary per child to one that did not; the task is copied
// for the latter, so the next attempt, on a worker that takes columns, still
// gets columns.
func TestStager_SendsARollupInTheFormEachWorkerTakes(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "bom", Version: "v1"}
	reg := newRegistry(testLog(t))
	g := &stager{id: "b", reg: reg, completions: newCompletions(nil, testLog(t)), leases: newLeaseKeys(nil),
		clock: newFakeClock(), log: testLog(t), redeliveryWait: time.Minute, attempts: &fakeAttempts{limit: 5}}
	newSess := func(id string, compact bool) *session {
		s := &session{id: id, holder: id, maxIn: 4, compactRollups: compact, ready: map[manifest.KindVersion]bool{kv: true},
			out: make(chan *workerv1.WorkStreamResponse, 4), done: make(chan struct{})}
		reg.add(s)
		return s
	}
	root := uuid.New()
	b := childcols.New(root, 0, false)
	b.Add(uuid.New(), "account", "a", "Ready", true, nil, root)
	b.Add(uuid.New(), "vpc", "v", "Failed", false, nil, root)
	cols, err := b.Finish()
	require.NoError(t, err)
	want, err := childcols.Summaries(cols, root.String())
	require.NoError(t, err)

	task := pipeline.Task{Key: pipeline.TaskKey{ResourceID: root, TaskType: pipeline.TaskReconcile}, ClaimEpoch: 1,
		Resource: pipeline.Snapshot{ID: root, Kind: kv.Kind, Version: kv.Version, Name: "bom"}}
	legacy := newSess("legacy", false)
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	defer func() { cancel(); <-ended }() // the stage waits for a result nobody sends
	go func() {
		defer close(ended)
		_, _, _ = g.stage(ctx, task, store.Kind{}, workerv1.Stage_STAGE_ROLLUP,
			manifest.ReactionDecl{Name: "rollup"}, true, &workerv1.StageTask_Rollup{Rollup: &workerv1.RollupRequest{Compact: cols}})
	}()
	received := func(s *session) *workerv1.RollupRequest {
		t.Helper()
		select {
		case m := <-s.out:
			return m.GetTask().GetRollup()
		case <-time.After(30 * time.Second):
			t.Fatalf("the rollup never reached %s", s.id)
			return nil
		}
	}
	got := received(legacy)
	require.Nil(t, got.GetCompact(), "no columns for a worker that did not ask for them")
	require.Len(t, got.GetChildren(), 2)
	for i := range want {
		require.Equal(t, want[i].String(), got.GetChildren()[i].String())
	}

	compact := newSess("compact", true)
	reg.remove(legacy)
	close(legacy.done) // lost mid-stage: the stage moves to the other worker
	got = received(compact)
	require.Empty(t, got.GetChildren())
	require.Same(t, cols, got.GetCompact(), "columns as built, not a copy")
}

// A relayed rollup is spelled out: the peer may predate columns.
func TestInForm_ARelayedRollupIsSpelledOut(t *testing.T) {
	t.Parallel()
	root := uuid.New()
	b := childcols.New(root, 0, true)
	b.Add(uuid.New(), "vpc", "v", "Ready", true, []byte(`{"id":1}`), root)
	cols, err := b.Finish()
	require.NoError(t, err)
	task := &workerv1.StageTask{TaskId: "t", Resource: &workerv1.Resource{Id: root.String()},
		Request: &workerv1.StageTask_Rollup{Rollup: &workerv1.RollupRequest{Compact: cols}}}
	out, err := inForm(task, nil)
	require.NoError(t, err)
	require.Len(t, out.GetRollup().GetChildren(), 1)
	require.JSONEq(t, `{"id":1}`, string(out.GetRollup().GetChildren()[0].GetStatusJson()))
	require.Same(t, cols, task.GetRollup().GetCompact(), "the original task keeps its columns")

	work := &workerv1.StageTask{TaskId: "w", Request: &workerv1.StageTask_Work{Work: &workerv1.WorkRequest{}}}
	out, err = inForm(work, nil)
	require.NoError(t, err)
	require.Same(t, work, out, "only rollups change form")
}

// A task's resource carries the parts its reaction reads, and its identity
// always.
func TestStageTask_CarriesThePartsTheReactionReads(t *testing.T) {
	t.Parallel()
	g := &stager{id: "b", clock: newFakeClock()}
	owner := uuid.New()
	task := pipeline.Task{Key: pipeline.TaskKey{ResourceID: uuid.New()}, ClaimEpoch: 3, Generation: 7,
		Resource: pipeline.Snapshot{Kind: "vpc", Version: "v1", Name: "v", OwnerID: &owner,
			Spec: []byte(`{"cidr":"10.0.0.0/24"}`), Status: []byte(`{"vpc_id":"x"}`),
			LabelsJSON: []byte(`{"team": "t1"}`), Finalizers: []string{"cloud"}}}
	task.Resource.ID = task.Key.ResourceID
	only := func(bits ...manifest.ReadBit) *manifest.ReadMask {
		m := manifest.Reads(bits...)
		return &m
	}
	cases := map[string]struct {
		reads                          *manifest.ReadMask
		spec, status, labels, finalize bool
	}{
		"no reads declared: all": {nil, true, true, true, true},
		"spec only":              {only(manifest.ReadSpec), true, false, false, false},
		"status and labels":      {only(manifest.ReadStatus, manifest.ReadLabels), false, true, true, false},
		"finalizers":             {only(manifest.ReadFinalizers), false, false, false, true},
		"identity only":          {only(), false, false, false, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st, err := g.stageTask(context.Background(), task, store.Kind{}, workerv1.Stage_STAGE_WORK,
				manifest.ReactionDecl{Name: "work", Reads: tc.reads}, "tid", &workerv1.StageTask_Work{Work: &workerv1.WorkRequest{}})
			require.NoError(t, err)
			r := st.GetResource()
			require.Equal(t, []any{task.Key.ResourceID.String(), "vpc", "v1", "v", int64(7), owner.String()},
				[]any{r.GetId(), r.GetKind(), r.GetVersion(), r.GetName(), r.GetGeneration(), r.GetOwnerId()}, "identity")
			require.Equal(t, tc.spec, len(r.GetSpecJson()) > 0, "spec")
			require.Equal(t, tc.status, len(r.GetStatusJson()) > 0, "status")
			if tc.labels {
				require.Equal(t, map[string]string{"team": "t1"}, r.GetLabels(), "labels")
			} else {
				require.Empty(t, r.GetLabels(), "labels")
			}
			require.Equal(t, tc.finalize, len(r.GetFinalizers()) > 0, "finalizers")
		})
	}
}

// Labels are decoded only for a reaction that reads them; labels that do
// not decode fail that reaction's stage for good, naming the resource, and
// cost any other reaction nothing.
func TestStageTask_LabelsThatDoNotDecodeFailOnlyAReactionThatReadsThem(t *testing.T) {
	t.Parallel()
	g := &stager{id: "b", clock: newFakeClock()}
	task := pipeline.Task{Key: pipeline.TaskKey{ResourceID: uuid.New()}, ClaimEpoch: 1, Generation: 2,
		Resource: pipeline.Snapshot{Kind: "vpc", Version: "v1", Name: "v", Spec: []byte(`{}`), LabelsJSON: []byte(`{"team": 7}`)}}
	work := &workerv1.StageTask_Work{Work: &workerv1.WorkRequest{}}
	spec := manifest.Reads(manifest.ReadSpec)
	st, err := g.stageTask(context.Background(), task, store.Kind{}, workerv1.Stage_STAGE_WORK,
		manifest.ReactionDecl{Name: "work", Reads: &spec}, "tid", work)
	require.NoError(t, err, "a reaction that reads the spec alone")
	require.NotNil(t, st.GetResource().GetSpecJson())

	_, err = g.stageTask(context.Background(), task, store.Kind{}, workerv1.Stage_STAGE_WORK,
		manifest.ReactionDecl{Name: "work"}, "tid", work) // no reads declared: all, labels too
	var se *stageError
	require.ErrorAs(t, err, &se)
	require.True(t, se.terminal, "the labels cannot change without a new generation")
	require.Contains(t, se.msg, "the labels of vpc v1/v are not a JSON object of strings")
}
