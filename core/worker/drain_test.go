package worker_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/worker"
)

// TestServe_ATaskTheDrainCancelsIsHandedBackUnanswered: when the drain
// budget is spent, a task whose handler fails because the drain cancelled
// it (here, returning ctx.Err()), or ignores the cancellation past the
// grace, is handed back: no result is sent, and the broker, which heard
// the worker go unready, dispatches it again at once without counting an
// attempt. Its "context canceled" went out as a transient failure before:
// an attempt toward max_transient_attempts and a retry backoff for every
// task a rolling update cut short. A handler that finishes in spite of the
// cancellation is delivered.
func TestServe_ATaskTheDrainCancelsIsHandedBackUnanswered(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.acks = true
	unstick := make(chan struct{})
	t.Cleanup(func() { close(unstick) })
	started := make(chan string, 3)
	p := newProvider("vpc", func(ctx context.Context, r worker.Request) (worker.Outcome, error) {
		started <- r.Resource.Name
		switch r.Resource.Name {
		case "hung":
			<-unstick
		case "finishes":
			<-ctx.Done()
			return worker.Outcome{Status: []byte(`{"done":true}`)}, nil
		}
		<-ctx.Done()
		return worker.Outcome{}, ctx.Err()
	})
	cancel, done := startWorker(t, b, worker.Options{DrainTimeout: 100 * time.Millisecond}, p)
	b.next(t, "subscribe", isSubscribe)
	for i, name := range []string{"cancelled", "hung", "finishes"} {
		b.send(task(name, "vpc", int64(i+1), 0))
	}
	for range 3 {
		<-started
	}
	cancel()
	b.next(t, "the finished task's result", carries("finishes"))
	b.ack("finishes")
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	select {
	case <-b.streamsEnded:
	case <-time.After(20 * time.Second):
		t.Fatal("the stream did not end")
	}
	for {
		select {
		case m := <-b.inbox:
			for _, c := range append(m.GetCompletes().GetCompletes(), m.GetComplete()) {
				if id := c.GetTaskId(); id == "cancelled" || id == "hung" {
					t.Fatalf("the drain answered %s: %v", id, c.GetError().GetMessage())
				}
			}
		default:
			return
		}
	}
}

// TestServe_AnIdleWorkersDrainEndsAtOnce: with nothing running and no
// result awaiting an ack, the drain has nothing to wait for: Run returns
// as soon as the session is closed, with no poll or backoff in between
// (the TypeScript SDK's counterpart is in its node:test suite).
func TestServe_AnIdleWorkersDrainEndsAtOnce(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.acks, b.batches = true, true
	p := newProvider("vpc", func(context.Context, worker.Request) (worker.Outcome, error) { return worker.Outcome{}, nil })
	cancel, done := startWorker(t, b, worker.Options{}, p)
	b.next(t, "subscribe", isSubscribe)
	began := time.Now()
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	require.Less(t, time.Since(began), time.Second, "an idle worker's drain waited on something")
}
