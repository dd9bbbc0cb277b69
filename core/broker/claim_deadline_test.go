package broker

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// The tasks of one claim run under one context with the claim's deadline,
// which only the claim's last finished task ends; a task whose deadline
// differs, or one without a claim, gets its own.
func TestClaimDeadline_OneContextPerClaimEndedByItsLastTask(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		parent := context.Background()
		due := newClaimDeadline(parent, []pipeline.Task{{Deadline: time.Minute}, {Deadline: time.Minute}})
		a, cancelA := due.context(parent, time.Minute)
		b, cancelB := due.context(parent, time.Minute)
		require.True(t, a == b, "the claim's tasks share one context")
		cancelA()
		cancelB()
		require.NoError(t, a.Err(), "a task's own cancel does not end the claim's context")
		d, ok := a.Deadline()
		require.True(t, ok)
		require.Equal(t, time.Now().Add(time.Minute), d, "the claim's deadline, from the claim")

		other, cancelOther := due.context(parent, 10*time.Second)
		defer cancelOther()
		require.False(t, other == a, "a different deadline gets a context of its own")
		d, _ = other.Deadline()
		require.Equal(t, time.Now().Add(10*time.Second), d)

		own, cancelOwn := (*claimDeadline)(nil).context(parent, 5*time.Second)
		defer cancelOwn()
		d, _ = own.Deadline()
		require.Equal(t, time.Now().Add(5*time.Second), d, "no claim: a context of its own")

		due.done()
		require.NoError(t, a.Err(), "one task of two done: the context lives on")
		due.done()
		require.ErrorIs(t, a.Err(), context.Canceled, "the last task done ends it")

		none := newClaimDeadline(parent, []pipeline.Task{{}})
		none.done() // no deadline: nothing to end, and no panic
	})
}

// A leaf runs under its claim's context, so its deadline counts from the
// claim; a compose waits for its slot first and its own deadline starts only
// once it has the slot.
func TestRunnerRunTask_DeadlineFromTheClaimOrFromTheSlot(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		composer := manifest.ReactionDecl{Name: "compose", Trigger: manifest.TriggerSpecChange, Emits: manifest.Mask(manifest.OutcomeChildren)}
		bom := store.Kind{Name: "bom", Version: "v1", Manifest: manifest.KindManifest{Kind: "bom", Version: "v1",
			Reactions: []manifest.ReactionDecl{composer}}}
		deadlines := make(chan time.Time, 2)
		out := newOutboxWriter(func(context.Context, ...pipeline.Result) error { return nil })
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() { _ = out.Run(ctx) }()
		rn := &runner{
			store: &fakeTaskStore{ApplyComposeFn: func(context.Context, pipeline.Task, pipeline.Composition) (pipeline.ComposeResult, error) {
				return pipeline.ComposeResult{}, nil
			}},
			stages: &fakeStageDispatcher{StageFn: func(ctx context.Context, _ pipeline.Task, _ workerv1.Stage, _ string, _ bool) (*workerv1.Outcome, error) {
				d, ok := ctx.Deadline()
				require.True(t, ok, "a stage runs under its task's deadline")
				deadlines <- d
				return &workerv1.Outcome{}, nil
			}},
			outbox: out, kinds: fakeKinds{bom, workerKind}, composes: newTaskSlots(1, DefaultComposeSlots),
			metrics: metrics.New(), clock: engine.RealClock, log: testLog(t),
		}

		leaf := task(1, pipeline.TaskReconcile)
		leaf.Resource = pipeline.Snapshot{Kind: "vpc", Version: "v1", Name: "vpc-1"}
		leaf.Generation, leaf.Deadline = 1, time.Minute
		due := newClaimDeadline(ctx, []pipeline.Task{leaf})
		claimed := time.Now()
		time.Sleep(10 * time.Second) // the leaf starts a while after its claim
		rn.runTask(ctx, pipeline.Lease{WorkerID: "broker-1"}, leaf, due, func() {})
		require.Equal(t, claimed.Add(time.Minute), <-deadlines, "a leaf's deadline counts from its claim")

		root := task(2, pipeline.TaskReconcile)
		root.Resource = pipeline.Snapshot{Kind: "bom", Version: "v1", Name: "root"}
		root.Generation, root.Deadline = 1, time.Minute
		due = newClaimDeadline(ctx, []pipeline.Task{root})
		holder, err := acquire(ctx, rn.composes)
		require.NoError(t, err)
		ran := make(chan struct{})
		rn.runTask(ctx, pipeline.Lease{WorkerID: "broker-1"}, root, due, func() { close(ran) })
		time.Sleep(2 * time.Minute) // past the claim's deadline, waiting for the slot
		synctest.Wait()
		select {
		case <-ran:
			t.Fatal("the compose ran without its slot")
		default:
		}
		slotted := time.Now()
		holder()
		<-ran
		require.Equal(t, slotted.Add(time.Minute), <-deadlines, "a compose's deadline counts from its slot")
	})
}
