package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

type fakeTaskStore struct {
	ReleaseFn      func(ctx context.Context, l pipeline.Lease, keys []pipeline.TaskKey) (int, error)
	ApplyComposeFn func(ctx context.Context, t pipeline.Task, c pipeline.Composition) (pipeline.ComposeResult, error)
}

func (f *fakeTaskStore) SubtreeSettled(context.Context, uuid.UUID) (bool, error) {
	panic("unexpected SubtreeSettled")
}
func (f *fakeTaskStore) WalkComposedSubtree(context.Context, uuid.UUID, bool, func(store.SubtreeNode)) (bool, error) {
	panic("unexpected WalkComposedSubtree")
}
func (f *fakeTaskStore) OperationForTask(context.Context, uuid.UUID) (resource.Operation, error) {
	panic("unexpected OperationForTask")
}
func (f *fakeTaskStore) ApplyCompose(ctx context.Context, t pipeline.Task, c pipeline.Composition) (pipeline.ComposeResult, error) {
	if f.ApplyComposeFn == nil {
		panic("unexpected ApplyCompose")
	}
	return f.ApplyComposeFn(ctx, t, c)
}
func (f *fakeTaskStore) Release(ctx context.Context, l pipeline.Lease, keys []pipeline.TaskKey) (int, error) {
	return f.ReleaseFn(ctx, l, keys)
}

type fakeStageDispatcher struct {
	StageFn func(ctx context.Context, t pipeline.Task, stage workerv1.Stage, reaction string, final bool) (*workerv1.Outcome, error)
	// AckFn, if set, is the ack returned for a final stage's result.
	AckFn func()
}

func (f *fakeStageDispatcher) stage(ctx context.Context, t pipeline.Task, _ store.Kind, stage workerv1.Stage, reaction manifest.ReactionDecl,
	final bool, _ any) (*workerv1.Outcome, func(), error) {
	out, err := f.StageFn(ctx, t, stage, reaction.Name, final)
	if !final || f.AckFn == nil {
		return out, noAck, err
	}
	return out, f.AckFn, err
}

var workerKind = store.Kind{Name: "vpc", Version: "v1", Manifest: manifest.KindManifest{Kind: "vpc", Version: "v1",
	Reactions: []manifest.ReactionDecl{{Name: "work", Trigger: manifest.TriggerSpecChange, Emits: manifest.Mask(manifest.OutcomeStatus)}}}}

// A leaf task runs its work stage and writes exactly one outcome: its
// status, its failure, or — abandoned — nothing but a released lease.
func TestRunnerRunTask_Leaf(t *testing.T) {
	t.Parallel()
	type want struct {
		written  bool
		status   string
		errorHas string
		terminal bool
		released bool
		// acked: the worker's result was acked, after the write settled.
		acked bool
	}
	cases := map[string]struct {
		reason     string
		kinds      fakeKinds
		outcome    *workerv1.Outcome
		stageErr   error
		appendErr  error
		releaseErr error
		want       want
	}{
		"StatusIsWritten": {
			reason: "the work stage's status is the result", kinds: fakeKinds{workerKind},
			outcome: &workerv1.Outcome{StatusJson: []byte(`{"id":"vpc-1"}`)},
			want:    want{written: true, status: `{"id":"vpc-1"}`, acked: true},
		},
		"ACompletionWithoutAResultIsAnEmptyOutcome": {
			reason: "a completion carrying neither an outcome nor an error (a broken worker) writes an empty outcome, never crashes the broker",
			kinds:  fakeKinds{workerKind}, outcome: nil,
			want: want{written: true, acked: true},
		},
		"WorkerErrorIsAFailure": {
			reason: "a worker's terminal error fails the task terminally", kinds: fakeKinds{workerKind},
			stageErr: &stageError{msg: "quota exceeded", terminal: true},
			want:     want{written: true, errorHas: "quota exceeded", terminal: true, acked: true},
		},
		"InvalidOutcomeIsAFailure": {
			reason: "a malformed status is recorded as the task's failure rather than dropped", kinds: fakeKinds{workerKind},
			outcome: &workerv1.Outcome{StatusJson: []byte(`{not json`)},
			want:    want{written: true, errorHas: "invalid outcome", acked: true},
		},
		"UnknownKindIsAFailure": {
			reason: "a task whose manifest vanished fails", want: want{written: true, errorHas: "no applied manifest"},
		},
		"AbandonedTaskIsReleased": {
			reason: "a fenced task writes nothing and gives its lease back", kinds: fakeKinds{workerKind},
			stageErr: errAbandon, want: want{released: true, acked: true},
		},
		"LostWorkerIsNoFailure": {
			reason: "a worker that vanished with no other to take over is released, never recorded as the task's error",
			kinds:  fakeKinds{workerKind}, stageErr: errWorkerLost, want: want{released: true, acked: true},
		},
		"OutboxFailureReleases": {
			reason: "a result that could not be written is released for a retry", kinds: fakeKinds{workerKind},
			outcome: &workerv1.Outcome{StatusJson: []byte(`{}`)}, appendErr: errors.New("disk full"),
			want: want{written: true, status: `{}`, released: true, acked: true},
		},
		"OutboxAndReleaseFailureKeepTheResultWithTheWorker": {
			reason: "neither written nor released: the result stays unacked, for the worker to redeliver", kinds: fakeKinds{workerKind},
			outcome: &workerv1.Outcome{StatusJson: []byte(`{}`)}, appendErr: errors.New("disk full"),
			// Refused, not unreachable: an unreachable database's release
			// is retried for a minute (outboxRetryFor), and the test took it.
			releaseErr: errors.New("permission denied for table work_queue"),
			want:       want{written: true, status: `{}`, released: true},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var mu sync.Mutex
			var written []pipeline.Result
			out := newOutboxWriter(storeAppend(func(rs ...pipeline.Result) error {
				mu.Lock()
				written = append(written, rs...)
				mu.Unlock()
				return tc.appendErr
			}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = out.Run(ctx) }()
			released, acked := false, false
			rn := &runner{
				store: &fakeTaskStore{ReleaseFn: func(context.Context, pipeline.Lease, []pipeline.TaskKey) (int, error) {
					released = true
					return 1, tc.releaseErr
				}},
				stages: &fakeStageDispatcher{StageFn: func(_ context.Context, _ pipeline.Task, stage workerv1.Stage, reaction string, final bool) (*workerv1.Outcome, error) {
					require.Equal(t, workerv1.Stage_STAGE_WORK, stage)
					require.Equal(t, "work", reaction)
					require.True(t, final, "a leaf's work stage is its last")
					return tc.outcome, tc.stageErr
				}, AckFn: func() {
					mu.Lock()
					defer mu.Unlock()
					require.False(t, acked, "acked once")
					acked = true
					require.Equal(t, tc.want.written, len(written) > 0, "acked only after the write settled")
				}},
				outbox: out, kinds: tc.kinds, metrics: metrics.New(), clock: engine.RealClock, log: testLog(t),
			}
			tk := task(5, pipeline.TaskReconcile)
			tk.Resource = pipeline.Snapshot{Kind: "vpc", Version: "v1", Name: "vpc-1"}
			tk.Generation = 1
			rn.runTask(ctx, pipeline.Lease{WorkerID: "broker-1"}, tk, nil, func() {})

			require.Equal(t, tc.want.released, released, tc.reason)
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, tc.want.acked, acked, tc.reason)
			if !tc.want.written {
				require.Empty(t, written, tc.reason)
				return
			}
			require.Len(t, written, 1, tc.reason)
			res := written[0]
			require.Equal(t, tk.Key, res.Key, tc.reason)
			if tc.want.status != "" {
				require.JSONEq(t, tc.want.status, string(res.Status), tc.reason)
			}
			require.True(t, strings.Contains(res.Error, tc.want.errorHas), "%s: error %q", tc.reason, res.Error)
			require.Equal(t, tc.want.terminal, res.Terminal, tc.reason)
		})
	}
}

// The database going away under a task's own store step (a Postgres
// restart) is the control plane's outage: the step is retried until the
// database is back, within the task's deadline, and the resource is not
// recorded as failed. An error the database answers with fails at once.
func TestRunnerRunTask_AnUnreachableDatabaseIsRetriedNotRecorded(t *testing.T) {
	t.Parallel()
	refused := fmt.Errorf("compose: begin: %w", syscall.ECONNREFUSED)
	cases := map[string]struct {
		errs     []error // ApplyCompose's answers, in order; then nil
		deadline time.Duration
		calls    int
		errorHas string
	}{
		"RetriedUntilTheDatabaseIsBack": {errs: []error{refused, refused}, calls: 3},
		"ARefusalFailsAtOnce":           {errs: []error{errors.New("compose: check violation")}, calls: 1, errorHas: "check violation"},
		"TheDeadlineStillBoundsIt": {errs: slices.Repeat([]error{refused}, 1000), deadline: 300 * time.Millisecond,
			errorHas: "task deadline of 300ms exceeded"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			calls := 0
			written := runComposeTask(t, tc.deadline, func() (pipeline.ComposeResult, error) {
				calls++
				if calls <= len(tc.errs) {
					return pipeline.ComposeResult{}, tc.errs[calls-1]
				}
				return pipeline.ComposeResult{Created: 1}, nil
			})
			if tc.calls > 0 {
				require.Equal(t, tc.calls, calls)
			}
			require.Len(t, written, 1)
			if tc.errorHas == "" {
				require.Empty(t, written[0].Error, "the outage is not the resource's failure")
				return
			}
			require.Contains(t, written[0].Error, tc.errorHas)
			require.False(t, written[0].Terminal)
		})
	}
}

// runComposeTask runs a composite root's reconcile through a runner whose
// worker composes one child and whose store answers the compose with apply,
// and returns the results it wrote.
func runComposeTask(t *testing.T, deadline time.Duration, apply func() (pipeline.ComposeResult, error)) []pipeline.Result {
	t.Helper()
	composer := manifest.ReactionDecl{Name: "compose", Trigger: manifest.TriggerSpecChange, Emits: manifest.Mask(manifest.OutcomeChildren)}
	bom := store.Kind{Name: "bom", Version: "v1", Manifest: manifest.KindManifest{Kind: "bom", Version: "v1",
		Reactions: []manifest.ReactionDecl{composer}}}
	tk := task(5, pipeline.TaskReconcile)
	tk.Resource = pipeline.Snapshot{Kind: "bom", Version: "v1", Name: "root"}
	tk.Generation, tk.Deadline = 1, deadline
	return runOneTask(t, fakeKinds{bom, workerKind}, tk,
		&fakeTaskStore{ApplyComposeFn: func(context.Context, pipeline.Task, pipeline.Composition) (pipeline.ComposeResult, error) {
			return apply()
		}},
		&fakeStageDispatcher{StageFn: func(context.Context, pipeline.Task, workerv1.Stage, string, bool) (*workerv1.Outcome, error) {
			return &workerv1.Outcome{Children: []*workerv1.Child{{Kind: "vpc", Version: "v1", Name: "a"}}}, nil
		}})
}

// runOneTask runs tk through a runner over kinds, st and stages, and
// returns the results it wrote.
func runOneTask(t *testing.T, kinds fakeKinds, tk pipeline.Task, st *fakeTaskStore, stages *fakeStageDispatcher) []pipeline.Result {
	t.Helper()
	var mu sync.Mutex
	var written []pipeline.Result
	out := newOutboxWriter(storeAppend(func(rs ...pipeline.Result) error {
		mu.Lock()
		defer mu.Unlock()
		written = append(written, rs...)
		return nil
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() { _ = out.Run(ctx) }()
	rn := &runner{store: st, stages: stages, outbox: out, kinds: kinds, metrics: metrics.New(), clock: engine.RealClock,
		outage: &engine.Outage{Log: testLog(t)}, log: testLog(t)}
	rn.runTask(ctx, pipeline.Lease{WorkerID: "broker-1"}, tk, nil, func() {})
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(written)
}

// What the store answers a compose with decides the root's result: a
// refused composition fails it for good, a refusal that passes by itself (an
// edge to a resource being deleted) fails it to be retried, and a root marked
// for deletion since its claim finishes with nothing written.
func TestRunnerRunTask_ComposeRefusals(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		res      pipeline.ComposeResult
		err      error
		errorHas string
		terminal bool
	}{
		"ASchemaViolationIsTerminal": {err: &pipeline.ComposeError{Child: "a", Rule: "type", Message: "expected string"},
			errorHas: `child "a"`, terminal: true},
		"ADeletingDependencyIsRetried": {err: &pipeline.ComposeError{Child: "a", Rule: pipeline.RuleDependencyDeleting,
			Message: "edge to vpc/shared: it is being deleted"}, errorHas: "being deleted [dependency_deleting]"},
		"ADeletingRootFinishesWithNothingWritten": {res: pipeline.ComposeResult{RootDeleting: true}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			written := runComposeTask(t, 0, func() (pipeline.ComposeResult, error) { return tc.res, tc.err })
			require.Len(t, written, 1)
			if tc.errorHas == "" {
				require.Empty(t, written[0].Error)
				return
			}
			require.Contains(t, written[0].Error, tc.errorHas)
			require.Equal(t, tc.terminal, written[0].Terminal)
		})
	}
}

// A delete strips the finalizer its resource was seeded with — the kind's
// finalizer_name, when it names one — even where a manifest stored before
// the rule that they agree gives its deleter another.
func TestRunnerRunTask_ADeleteStripsTheSeededFinalizer(t *testing.T) {
	t.Parallel()
	deleter := manifest.ReactionDecl{Name: "teardown", Trigger: manifest.TriggerDeleteRequested,
		Emits: manifest.Mask(manifest.OutcomeFinalizer), Finalizer: "reaction.example.com/teardown"}
	for name, tc := range map[string]struct {
		finalizerName, want string
	}{
		"TheKindsFinalizerName":      {"seeded.example.com/teardown", "seeded.example.com/teardown"},
		"TheDeletersWhenNoneIsNamed": {"", "reaction.example.com/teardown"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fin := store.Kind{Name: "fin", Version: "v1", Manifest: manifest.KindManifest{Kind: "fin", Version: "v1",
				FinalizerName: tc.finalizerName, Reactions: []manifest.ReactionDecl{deleter}}}
			tk := task(7, pipeline.TaskDelete)
			tk.Resource = pipeline.Snapshot{Kind: "fin", Version: "v1", Name: "a"}
			written := runOneTask(t, fakeKinds{fin}, tk, &fakeTaskStore{},
				&fakeStageDispatcher{StageFn: func(context.Context, pipeline.Task, workerv1.Stage, string, bool) (*workerv1.Outcome, error) {
					return &workerv1.Outcome{}, nil
				}})
			require.Len(t, written, 1)
			require.Empty(t, written[0].Error)
			require.Equal(t, tc.want, written[0].Finalizer)
		})
	}
}
