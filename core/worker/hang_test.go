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

// TestServe_ATaskWhoseDeadlinePassedWaitingForASlotIsNotRun: a task's
// deadline counts from its arrival, as the broker's timer does: one that
// waited past it for a slot (every slot busy, as after a reconnect that
// resumed running tasks, which the broker does not count) is answered with
// the deadline failure and its handler never runs. It ran with a fresh
// deadline before, after the broker had released it (and handed it to
// another worker): the same task twice at once.
func TestServe_ATaskWhoseDeadlinePassedWaitingForASlotIsNotRun(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	release := make(chan struct{})
	ran := make(chan string, 4)
	p := newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		ran <- r.Resource.Name
		if r.Resource.Name == "busy" {
			<-release
		}
		return worker.Outcome{Status: json.RawMessage(`{}`)}, nil
	})
	startWorker(t, b, worker.Options{MaxParallel: 1}, p)
	b.next(t, "subscribe", isSubscribe)
	b.send(task("busy", "vpc", 1, 0))
	require.Equal(t, "busy", <-ran)
	sent := time.Now()
	b.send(task("late", "vpc", 2, 100))
	// Past the queued task's deadline, measured from before it was sent.
	time.Sleep(time.Until(sent.Add(300 * time.Millisecond)))
	close(release)
	b.next(t, "the busy task's result", isComplete("busy"))
	c := b.next(t, "the late task's answer", isComplete("late")).GetComplete()
	require.Contains(t, c.GetError().GetMessage(), "deadline of 100ms exceeded")
	require.False(t, c.GetError().GetTerminal())
	select {
	case name := <-ran:
		t.Fatalf("the handler ran for %q after its task's deadline", name)
	default:
	}
}

// TestServe_ATaskWaitingForASlotDoesNotStopTheReceiveLoop: a task that
// arrives while every slot is busy (the broker does not count the tasks a
// reconnecting worker resumed) waits for its slot off the stream's receive
// loop: config pushes and acks are still taken meanwhile. The receive loop
// itself waited for the slot before, and the push waited for the running
// task to end.
func TestServe_ATaskWaitingForASlotDoesNotStopTheReceiveLoop(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	release := make(chan struct{})
	p := newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		if r.Resource.Name == "long" {
			<-release
		}
		return worker.Outcome{Status: json.RawMessage(`{}`)}, nil
	})
	startWorker(t, b, worker.Options{MaxParallel: 1, HeartbeatEvery: 20 * time.Millisecond}, p)
	b.next(t, "subscribe", isSubscribe)
	b.send(task("long", "vpc", 1, 0))
	b.next(t, "the long task named in a heartbeat", func(m *workerv1.WorkStreamRequest) bool {
		return len(m.GetHeartbeat().GetTasks()) == 1
	})
	b.send(task("queued", "vpc", 2, 0))
	b.outbox <- &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Config{Config: &workerv1.ConfigPush{Kind: "vpc",
		Config: &workerv1.ProviderConfig{Kind: "vpc", Name: "default", IsDefault: true, Revision: 7}}}}
	select {
	case cfg := <-p.configs:
		require.Equal(t, int64(7), cfg.Revision)
	case <-time.After(20 * time.Second):
		t.Fatal("the config push waited for a slot")
	}
	close(release)
	b.next(t, "the long task's result", isComplete("long"))
	b.next(t, "the queued task's result", isComplete("queued"))
}
