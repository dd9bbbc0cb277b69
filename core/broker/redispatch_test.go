package broker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

func TestStagerAwaitLost(t *testing.T) {
	t.Parallel()
	kv := manifest.KindVersion{Kind: "vpc", Version: "v1"}
	newSess := func(id string) *session {
		return &session{id: id, maxIn: 4, ready: map[manifest.KindVersion]bool{kv: true}, done: make(chan struct{})}
	}
	setup := func(t *testing.T) (*stager, *fakeClock, *session) {
		t.Helper()
		reg := newRegistry(testLog(t))
		gone := newSess("gone")
		reg.add(gone)
		reg.remove(gone)
		clk := newFakeClock()
		return &stager{reg: reg, clock: clk, log: testLog(t), redeliveryWait: time.Minute,
			completions: newCompletions(nil, testLog(t))}, clk, gone
	}
	t.Run("AnotherReadyWorkerTakesOverAtOnce", func(t *testing.T) {
		t.Parallel()
		g, _, gone := setup(t)
		g.reg.add(newSess("other"))
		c, err := g.awaitLost(context.Background(), kv, gone, &waiter{ch: make(chan completion)})
		require.NoError(t, err)
		require.Nil(t, c, "dispatch again now, without the redelivery wait")
	})
	t.Run("AWorkerJoiningEndsTheWait", func(t *testing.T) {
		t.Parallel()
		g, _, gone := setup(t)
		done := make(chan error, 1)
		go func() {
			_, err := g.awaitLost(context.Background(), kv, gone, &waiter{ch: make(chan completion)})
			done <- err
		}()
		select {
		case err := <-done:
			t.Fatalf("returned (%v) with no worker to take over", err)
		case <-time.After(50 * time.Millisecond):
		}
		g.reg.add(newSess("late"))
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(5 * time.Second):
			t.Fatal("a joining worker did not end the wait")
		}
	})
	t.Run("NoOtherWorkerWaitsForTheRedelivery", func(t *testing.T) {
		t.Parallel()
		g, _, gone := setup(t)
		ch := make(chan completion, 1)
		ch <- completion{msg: &workerv1.StageComplete{TaskId: "x"}, ack: noAck}
		c, err := g.awaitLost(context.Background(), kv, gone, &waiter{ch: ch})
		require.NoError(t, err)
		require.Equal(t, "x", c.msg.GetTaskId(), "the lost worker's redelivered result")
	})
	t.Run("TheRedeliveryWaitEndsIt", func(t *testing.T) {
		t.Parallel()
		g, clk, gone := setup(t)
		done := make(chan error, 1)
		go func() {
			_, err := g.awaitLost(context.Background(), kv, gone, &waiter{ch: make(chan completion)})
			done <- err
		}()
		clk.waits.WaitOrTimeout(t)
		clk.Advance(time.Minute)
		select {
		case err := <-done:
			require.NoError(t, err, "dispatch again after the window")
		case <-time.After(5 * time.Second):
			t.Fatal("the redelivery window did not end the wait")
		}
	})
	t.Run("TheTaskBudgetEndingIsAnAbandonNotAFailure", func(t *testing.T) {
		t.Parallel()
		g, _, gone := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := g.awaitLost(ctx, kv, gone, &waiter{ch: make(chan completion)})
		require.ErrorIs(t, err, errAbandon)
	})
}

func TestCompletions_ALateResultOfASupersededDispatchIsDiscarded(t *testing.T) {
	t.Parallel()
	var wrote int
	c := newCompletions(syncResults{outboxFunc(func() { wrote++ })}, testLog(t))
	id := taskID{stage: "STAGE_WORK", final: true}.String()
	c.supersede(id)
	acked := false
	c.complete(&workerv1.StageComplete{TaskId: id}, func() { acked = true })
	require.True(t, acked, "acked, so the worker drops it")
	require.Zero(t, wrote, "not written: a newer attempt answers for the stage")
	parsed, err := parseTaskID(attemptID(id, 2))
	require.NoError(t, err, "an attempt id parses as its stage's id")
	require.Equal(t, "STAGE_WORK", parsed.stage)
}

// outboxFunc is an outboxAppender that counts writes.
type outboxFunc func()

func (f outboxFunc) AppendOutbox(context.Context, ...pipeline.Result) error {
	f()
	return nil
}
