package worker_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// TestServe_AHandlerThatIgnoresItsDeadlineGivesBackItsSlot: a handler that
// never returns once its deadline passed is abandoned a grace later: its
// task is answered with the deadline failure and its slot taken by the next
// task, as the broker (whose timer released the task and the slot) expects.
// The hung handler held the slot for good before: with MaxParallel of them
// the worker, still connected and ready, ran nothing again, and its stream's
// receive loop stopped (no acks, no config pushes).
func TestServe_AHandlerThatIgnoresItsDeadlineGivesBackItsSlot(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	unstick := make(chan struct{})
	t.Cleanup(func() { close(unstick) })
	p := newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		if r.Resource.Name == "stuck" {
			<-unstick // ignores ctx
		}
		return worker.Outcome{Status: json.RawMessage(`{"ok":true}`)}, nil
	})
	startWorker(t, b, worker.Options{MaxParallel: 1}, p)
	b.next(t, "subscribe", isSubscribe)

	b.send(task("stuck", "vpc", 1, 50))
	c := b.next(t, "the hung task's answer", isComplete("stuck")).GetComplete()
	require.Contains(t, c.GetError().GetMessage(), "deadline of 50ms exceeded")
	require.False(t, c.GetError().GetTerminal(), "a deadline is a transient failure")

	b.send(task("next", "vpc", 2, 0))
	got := b.next(t, "the next task's result, in the freed slot", isComplete("next")).GetComplete()
	require.JSONEq(t, `{"ok":true}`, string(got.GetOutcome().GetStatusJson()))

	b.outbox <- &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Config{Config: &workerv1.ConfigPush{Kind: "vpc",
		Config: &workerv1.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, Revision: 5}}}}
	select {
	case cfg := <-p.configs:
		require.Equal(t, int64(5), cfg.Revision, "the receive loop still runs")
	case <-time.After(20 * time.Second):
		t.Fatal("the config push was never applied")
	}
}
