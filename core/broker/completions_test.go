package broker

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

type fakeAppender struct {
	AppendFn func(ctx context.Context, results ...pipeline.Result) error
}

func (f *fakeAppender) AppendOutbox(ctx context.Context, results ...pipeline.Result) error {
	return f.AppendFn(ctx, results...)
}

// A completion goes to the stage waiting for it; one whose waiter is gone is
// applied only when it was the task's final stage.
func TestCompletionsComplete(t *testing.T) {
	t.Parallel()
	id := func(final bool) string {
		return taskID{key: pipeline.TaskKey{ShardID: 3, ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile},
			epoch: 9, generation: 2, stage: "STAGE_WORK", final: final, finalizer: "x/y"}.String()
	}
	cases := map[string]struct {
		reason     string
		taskID     string
		waiting    bool
		appendErr  error
		wantRouted bool
		wantAppend bool
	}{
		"WaiterGetsIt": {
			reason: "a live stage receives its completion", taskID: id(false), waiting: true, wantRouted: true,
		},
		"RedeliveredFinalStageIsApplied": {
			reason: "a final stage redelivered after its waiter is gone is written, fenced on its epoch",
			taskID: id(true), wantAppend: true,
		},
		"RedeliveredFinalStageAppendFails": {
			reason: "a failed write is logged; the task re-runs after its lease lapses",
			taskID: id(true), appendErr: errors.New("connection reset"), wantAppend: true,
		},
		"OrphanedMidPipelineStageIsDropped": {
			reason: "a mid-pipeline result alone cannot finish the task", taskID: id(false),
		},
		"MalformedTaskIDIsDropped": {
			reason: "a completion naming no task of ours is dropped", taskID: "react|nonsense",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var appended []pipeline.Result
			c := newCompletions(&fakeAppender{AppendFn: func(_ context.Context, rs ...pipeline.Result) error {
				appended = append(appended, rs...)
				return tc.appendErr
			}}, testLog(t))
			var ch <-chan *workerv1.StageComplete
			if tc.waiting {
				var forget func()
				ch, forget = c.expect(tc.taskID)
				defer forget()
			}
			m := &workerv1.StageComplete{TaskId: tc.taskID, Result: &workerv1.StageComplete_Outcome{
				Outcome: &workerv1.Outcome{StatusJson: []byte(`{"ok":true}`)}}}
			c.complete(m)
			c.complete(m) // a duplicate redelivery never blocks
			if tc.wantRouted {
				require.Equal(t, m, <-ch, tc.reason)
			}
			require.Equal(t, tc.wantAppend, len(appended) > 0, tc.reason)
			if tc.wantAppend {
				require.Equal(t, int64(9), appended[0].ClaimEpoch, tc.reason)
				require.Equal(t, "x/y", appended[0].Finalizer, tc.reason)
				require.JSONEq(t, `{"ok":true}`, string(appended[0].Status), tc.reason)
			}
		})
	}
}
