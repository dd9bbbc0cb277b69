package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testlog"
	"github.com/converge-run/converge/core/testsignal"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

type fakeAppender struct {
	AppendFn func(ctx context.Context, results ...pipeline.Result) error
}

func (f *fakeAppender) AppendOutbox(ctx context.Context, results ...pipeline.Result) error {
	return f.AppendFn(ctx, results...)
}

// syncResults writes each queued result at once, on the caller's
// goroutine, through its appender: for tests that read a redelivered
// result's fate right after complete returns.
type syncResults struct {
	appender interface {
		AppendOutbox(ctx context.Context, results ...pipeline.Result) error
	}
}

func (s syncResults) queue(res pipeline.Result, then func(error)) error {
	if err := res.Validate(); err != nil {
		return err
	}
	then(s.appender.AppendOutbox(context.Background(), res))
	return nil
}

// runningWriter is an outbox writer over appendFn, running until the test
// ends.
func runningWriter(t *testing.T, appendFn func(context.Context, ...pipeline.Result) error) *outboxWriter {
	t.Helper()
	w := newOutboxWriter(appendFn)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return w
}

// A completion goes to the stage waiting for it; one whose waiter is gone is
// applied only when it was the task's final stage. Whoever settles it acks
// it: the waiter (not tested here), or completions once the redelivered write
// committed or was refused, or at once when it is dropped.
func TestCompletionsComplete(t *testing.T) {
	t.Parallel()
	id := func(final bool) string {
		return taskID{key: pipeline.TaskKey{ShardID: 3, ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile},
			epoch: 9, generation: 2, stage: "STAGE_WORK", final: final, finalizer: "x/y"}.String()
	}
	cases := map[string]struct {
		reason     string
		taskID     string
		status     string
		waiting    bool
		appendErr  error
		wantRouted bool
		wantAppend bool
		wantAcked  bool
	}{
		"WaiterGetsIt": {
			reason: "a live stage receives its completion and acks it itself", taskID: id(false), waiting: true, wantRouted: true,
		},
		"RedeliveredFinalStageIsApplied": {
			reason: "a final stage redelivered after its waiter is gone is written, fenced on its epoch, and acked",
			taskID: id(true), wantAppend: true, wantAcked: true,
		},
		"RedeliveredFinalStageAppendFails": {
			reason: "a failed write is logged and not acked: the worker redelivers it on its next session",
			taskID: id(true), appendErr: errors.New("connection reset"), wantAppend: true,
		},
		"RedeliveredFinalStageAppendRefused": {
			reason: "a result the outbox refuses will never be written: acked so the worker drops it",
			taskID: id(true), appendErr: fmt.Errorf("%w: nope", pipeline.ErrInvalidResult), wantAppend: true, wantAcked: true,
		},
		"RedeliveredInvalidResultIsDropped": {
			reason: "an invalid result is refused before the write, and acked", taskID: id(true), status: `{"ok":`,
			wantAcked: true,
		},
		"OrphanedMidPipelineStageIsDropped": {
			reason: "a mid-pipeline result alone cannot finish the task; nobody waits any more, so it is acked",
			taskID: id(false), wantAcked: true,
		},
		"MalformedTaskIDIsDropped": {
			reason: "a completion naming no task of ours is dropped and acked", taskID: "react|nonsense", wantAcked: true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var appended []pipeline.Result
			c := newCompletions(syncResults{&fakeAppender{AppendFn: func(_ context.Context, rs ...pipeline.Result) error {
				appended = append(appended, rs...)
				return tc.appendErr
			}}}, testLog(t))
			written := 0
			c.written = func(pipeline.TaskKey) { written++ }
			var ch <-chan completion
			if tc.waiting {
				w := c.expect(tc.taskID)
				ch = w.ch
				defer c.forget(tc.taskID, w)
			}
			status := tc.status
			if status == "" {
				status = `{"ok":true}`
			}
			m := &workerv1.StageComplete{TaskId: tc.taskID, Result: &workerv1.StageComplete_Outcome{
				Outcome: &workerv1.Outcome{StatusJson: []byte(status)}}}
			acked := 0
			c.complete(m, func() { acked++ })
			if tc.wantRouted {
				got := <-ch
				require.Equal(t, m, got.msg, tc.reason)
				require.Zero(t, acked, "the waiter, not completions, acks a routed result")
				got.ack()
			}
			require.Equal(t, tc.wantAppend, len(appended) > 0, tc.reason)
			if tc.wantAcked {
				require.Equal(t, 1, acked, tc.reason)
			} else if !tc.wantRouted {
				require.Zero(t, acked, tc.reason)
			}
			require.Equal(t, tc.wantAppend && tc.appendErr == nil, written == 1,
				"an adopted lease is let go once its result is written, only then: %s", tc.reason)
			if tc.wantAppend {
				require.Equal(t, int64(9), appended[0].ClaimEpoch, tc.reason)
				require.Equal(t, "x/y", appended[0].Finalizer, tc.reason)
				require.JSONEq(t, `{"ok":true}`, string(appended[0].Status), tc.reason)
			}
		})
	}
}

// A copy of a completion a stage already holds (the worker redelivering on a
// new session what it sent on a broken one) never blocks and is acked only
// when the stage settles the first; a later copy is acked at once. A
// completion left unread when the stage gives up is settled as if nobody had
// waited (a final stage's is written, then acked).
func TestCompletionsComplete_CopiesAndLeftovers(t *testing.T) {
	t.Parallel()
	final := func() string {
		return taskID{key: pipeline.TaskKey{ShardID: 1, ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile},
			epoch: 4, generation: 1, stage: "STAGE_WORK", final: true}.String()
	}
	var appended int
	c := newCompletions(syncResults{&fakeAppender{AppendFn: func(_ context.Context, rs ...pipeline.Result) error {
		appended += len(rs)
		return nil
	}}}, testLog(t))
	msg := func(id string) *workerv1.StageComplete {
		return &workerv1.StageComplete{TaskId: id, Result: &workerv1.StageComplete_Outcome{Outcome: &workerv1.Outcome{}}}
	}

	t.Run("CopiesAreAckedWithTheFirst", func(t *testing.T) {
		id := final()
		w := c.expect(id)
		ch := w.ch
		defer c.forget(id, w)
		var first, copied, late int
		c.complete(msg(id), func() { first++ })
		got := <-ch
		c.complete(msg(id), func() { copied++ })
		require.Zero(t, first+copied, "nothing is acked before the stage settles")
		got.ack()
		require.Equal(t, 1, first)
		require.Equal(t, 1, copied, "the copy is acked with the first")
		c.complete(msg(id), func() { late++ })
		require.Equal(t, 1, late, "a copy after the stage settled is acked at once")
		require.Zero(t, appended, "no copy is written by completions")
	})
	t.Run("LeftoverIsSettledAsAnOrphan", func(t *testing.T) {
		id := final()
		w := c.expect(id)
		acked := 0
		c.complete(msg(id), func() { acked++ })
		c.forget(id, w) // the stage gave up without reading it
		require.Equal(t, 1, appended, "the unread final result is written as a redelivery")
		require.Equal(t, 1, acked, "…and then acked")
	})
}

// A stage's round trip through completions (expect, the completion, its
// ack, forget) allocates the waiter, its channel (two allocations: the
// buffer of a channel of pointers is separate) and the settling ack alone:
// the ack of the one copy nearly every stage gets is held inline.
func TestCompletions_ARoundTripAllocatesTheWaiterAlone(t *testing.T) { //nolint:paralleltest // AllocsPerRun
	c := newCompletions(syncResults{&fakeAppender{}}, zerolog.Nop())
	m := &workerv1.StageComplete{TaskId: "t"}
	acked := 0
	ack := func() { acked++ }
	n := testing.AllocsPerRun(100, func() {
		w := c.expect("t")
		c.complete(m, ack)
		got := <-w.ch
		got.ack()
		c.forget("t", w)
	})
	require.Equal(t, 101, acked, "every completion acked once") // AllocsPerRun runs once more to warm up
	require.LessOrEqual(t, n, 4.0)
}

// A stage receives its completion into its waiter: awaiting one allocates
// nothing.
func TestStager_AwaitAllocatesNothing(t *testing.T) { //nolint:paralleltest // AllocsPerRun
	g := &stager{}
	s := &session{done: make(chan struct{})}
	w := &waiter{ch: make(chan completion, 1)}
	m := &workerv1.StageComplete{TaskId: "t"}
	var got *completion
	n := testing.AllocsPerRun(100, func() {
		w.ch <- completion{msg: m, ack: noAck}
		got, _ = g.await(context.Background(), manifest.KindVersion{}, s, w)
	})
	require.Zero(t, n)
	require.Same(t, m, got.msg)
}

// redeliveredFinal is a worker's redelivered result of a final stage.
func redeliveredFinal(shard int) *workerv1.StageComplete {
	id := taskID{key: pipeline.TaskKey{ShardID: shard, ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile},
		epoch: 1, generation: 1, stage: "STAGE_WORK", final: true}
	return &workerv1.StageComplete{TaskId: id.String(), Result: &workerv1.StageComplete_Outcome{Outcome: &workerv1.Outcome{}}}
}

// A redelivered result is handed to the outbox writer and settled when its
// write ends: complete returns at once, however slow the database (the
// session's receive loop that calls it must not wait for it), and the
// result is acked, and its adoption ended, only once it is written.
func TestCompletions_ARedeliveredResultIsWrittenOffTheCallersGoroutine(t *testing.T) {
	t.Parallel()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	c := newCompletions(runningWriter(t, func(context.Context, ...pipeline.Result) error {
		entered <- struct{}{}
		<-release // a frozen database
		return nil
	}), testLog(t))
	c.testSignals.redelivered.Init()
	written := make(chan pipeline.TaskKey, 1)
	c.written = func(k pipeline.TaskKey) { written <- k }
	var acked atomic.Int32
	m := redeliveredFinal(3)
	returned := make(chan struct{})
	go func() {
		c.complete(m, func() { acked.Add(1) })
		close(returned)
	}()
	select {
	case <-returned:
	case <-time.After(testsignal.Timeout):
		t.Fatal("complete waited for the write")
	}
	select {
	case <-entered:
	case <-time.After(testsignal.Timeout):
		t.Fatal("the result never reached the outbox")
	}
	require.Zero(t, acked.Load(), "not acked before it is written")
	close(release)
	require.NoError(t, c.testSignals.redelivered.WaitOrTimeout(t))
	require.Equal(t, int32(1), acked.Load(), "acked once written")
	id, err := parseTaskID(m.GetTaskId())
	require.NoError(t, err)
	require.Equal(t, id.key, <-written, "the adoption of its task ends")
}

// While the database is unreachable, the redelivered results a reconnecting
// worker sends (all of them again at every reconnect) are the process's
// outage, logged once when it starts and once when it ends, not a WARN each;
// none is acked, so the worker keeps them to redeliver.
func TestCompletions_RedeliveredWritesDuringAnOutageLogOnce(t *testing.T) {
	t.Parallel()
	var buf testlog.Buffer
	log := zerolog.New(&buf)
	var down atomic.Bool
	down.Store(true)
	c := newCompletions(runningWriter(t, func(context.Context, ...pipeline.Result) error {
		if down.Load() {
			return syscall.ECONNREFUSED
		}
		return nil
	}), log)
	c.outage = &engine.Outage{Log: log, Settle: time.Nanosecond}
	c.testSignals.redelivered.Init()
	var acked atomic.Int32
	const n = 500
	for i := range n {
		c.complete(redeliveredFinal(i%256), func() { acked.Add(1) })
	}
	for range n {
		require.ErrorIs(t, c.testSignals.redelivered.WaitOrTimeout(t), syscall.ECONNREFUSED)
	}
	require.Zero(t, acked.Load(), "a result not written is not acked: the worker redelivers it")
	require.Equal(t, 1, buf.Count(`"level":"warn"`), "one WARN for the outage, none per result:\n%s", buf.String())
	require.Equal(t, 1, buf.Count("database unreachable"))

	down.Store(false)
	c.complete(redeliveredFinal(1), func() { acked.Add(1) })
	require.NoError(t, c.testSignals.redelivered.WaitOrTimeout(t))
	require.Equal(t, int32(1), acked.Load())
	require.Equal(t, 1, buf.Count("database reachable again"), "the outage's end is logged once:\n%s", buf.String())
	require.Equal(t, 1, buf.Count(`"level":"warn"`))
}
