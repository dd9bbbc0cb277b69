package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

func isSubscribe(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() != nil }

// ack acknowledges results on the current stream.
func (b *scriptBroker) ack(ids ...string) {
	b.outbox <- &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Ack{Ack: &workerv1.ResultAck{TaskIds: ids}}}
}

// completesUntil collects the task ids of the completions the worker sends
// up to and including the one for last.
func (b *scriptBroker) completesUntil(t *testing.T, last string) []string {
	t.Helper()
	var ids []string
	b.next(t, "completion of "+last, func(m *workerv1.WorkStreamRequest) bool {
		if c := m.GetComplete(); c != nil {
			ids = append(ids, c.GetTaskId())
			return c.GetTaskId() == last
		}
		return false
	})
	return ids
}

func okProvider() *fakeProvider {
	return newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		return worker.Outcome{Status: json.RawMessage(`{"name":"` + r.Resource.Name + `"}`)}, nil
	})
}

// A send that succeeds proves nothing: the broker may die with the result
// written into its dead connection. Against a broker that acks, a result
// stays pending until acked and goes out again on the next session; an acked
// one never does.
func TestServe_UnackedResultIsRedeliveredOnTheNextSession(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.acks = true
	startWorker(t, b, worker.Options{}, okProvider())
	b.next(t, "subscribe", isSubscribe)

	b.send(task("lost", "vpc", 7, 0))
	require.Equal(t, []string{"lost"}, b.completesUntil(t, "lost"), "the send succeeded: the broker holds the message")
	b.killStream() // …and dies before it acks

	// The new session names the task whose result awaits its ack, so the
	// broker adopts its lease before anyone can claim it afresh (a new
	// claim epoch would fence the redelivered result out).
	resub := b.next(t, "re-subscribe", isSubscribe).GetSubscribe()
	require.Equal(t, map[string]int64{"lost": 7}, resumedEpochs(resub), "the unacked result's task is resumed")
	c := b.next(t, "redelivered completion", isComplete("lost")).GetComplete()
	require.Equal(t, int64(7), c.GetFence().GetClaimEpoch(), "redelivered with its original fence")
	require.JSONEq(t, `{"name":"lost"}`, string(c.GetOutcome().GetStatusJson()))

	// The successor acks it. The ack and the next task share the stream, so
	// once t2's completion arrives the ack has been taken.
	b.ack("lost")
	b.send(task("acked", "vpc", 8, 0))
	require.Equal(t, []string{"acked"}, b.completesUntil(t, "acked"))
	b.ack("acked")
	b.send(task("unacked", "vpc", 9, 0))
	require.Equal(t, []string{"unacked"}, b.completesUntil(t, "unacked"))
	b.killStream()

	third := b.next(t, "third subscribe", isSubscribe).GetSubscribe()
	require.Equal(t, map[string]int64{"unacked": 9}, resumedEpochs(third), "acked results are not resumed")
	b.send(task("fresh", "vpc", 10, 0))
	require.Equal(t, []string{"unacked", "fresh"}, b.completesUntil(t, "fresh"),
		"only the unacked result is redelivered, ahead of new work")
}

// The redelivery buffer bounds sent-but-unacked results too: past it the
// oldest is discarded and counted, and only the newest are redelivered.
func TestServe_UnackedResultsAreBoundedByTheBuffer(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.acks = true
	w, err := worker.New(b.srv.URL, worker.Options{BufferSize: 2, ReconnectMin: 10 * time.Millisecond,
		ReconnectMax: 50 * time.Millisecond}, okProvider())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done //nolint:errcheck // Run's error after cancel is context.Canceled
	})
	b.next(t, "subscribe", isSubscribe)
	for i := range 3 {
		id := fmt.Sprintf("t%d", i)
		b.send(task(id, "vpc", int64(i+1), 0))
		b.next(t, "completion of "+id, isComplete(id))
	}
	require.Equal(t, int64(1), w.Dropped(), "the oldest unacked result was discarded and counted")
	b.killStream()

	b.next(t, "re-subscribe", isSubscribe)
	require.Equal(t, []string{"t1", "t2"}, b.completesUntil(t, "t2"), "only the newest two are redelivered")
	// Only now the next task: had it finished before the redelivery, the
	// full buffer would have discarded t1 for it, as it should.
	b.send(task("fresh", "vpc", 9, 0))
	require.Equal(t, []string{"fresh"}, b.completesUntil(t, "fresh"))
}

// carries matches a message holding the result of task id, alone or in a
// batch.
func carries(id string) func(*workerv1.WorkStreamRequest) bool {
	alone := isComplete(id)
	return func(m *workerv1.WorkStreamRequest) bool {
		if alone(m) {
			return true
		}
		for _, c := range m.GetCompletes().GetCompletes() {
			if c.GetTaskId() == id {
				return true
			}
		}
		return false
	}
}

// Against a broker that acks and takes batches, a result finished while an
// earlier one awaits its ack is held back to share a message, until that
// ack or its linger: with no ack coming at all it still goes, no sooner
// than the linger.
func TestServe_AHeldResultGoesAtItsLingerOrTheAck(t *testing.T) {
	t.Parallel()
	t.Run("NoAckComes", func(t *testing.T) {
		t.Parallel()
		b := newScriptBroker(t)
		b.acks, b.batches = true, true
		const linger = 200 * time.Millisecond
		startWorker(t, b, worker.Options{ResultLinger: linger}, okProvider())
		b.next(t, "subscribe", isSubscribe)
		b.send(task("a", "vpc", 1, 0))
		b.next(t, "completion of a", carries("a"))
		sent := time.Now()
		b.send(task("b", "vpc", 2, 0))
		b.next(t, "completion of b", carries("b"))
		require.GreaterOrEqual(t, time.Since(sent), linger, "b was held while a awaited its ack")
	})
	t.Run("TheAckReleasesIt", func(t *testing.T) {
		t.Parallel()
		b := newScriptBroker(t)
		b.acks, b.batches = true, true
		startWorker(t, b, worker.Options{ResultLinger: time.Hour}, okProvider())
		b.next(t, "subscribe", isSubscribe)
		b.send(task("a", "vpc", 1, 0))
		b.next(t, "completion of a", carries("a"))
		b.send(task("b", "vpc", 2, 0))
		b.ack("a") // before or after b is done: either way b goes now, not in an hour
		b.next(t, "completion of b", carries("b"))
	})
}

// A broker that predates acks never sends one: a sent result is done, as
// before, and is not redelivered.
func TestServe_BrokerWithoutAcksSettlesOnSend(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	startWorker(t, b, worker.Options{}, okProvider())
	b.next(t, "subscribe", isSubscribe)
	b.send(task("once", "vpc", 1, 0))
	b.next(t, "completion", isComplete("once"))
	b.killStream()
	b.next(t, "re-subscribe", isSubscribe)
	b.send(task("next", "vpc", 2, 0))
	require.Equal(t, []string{"next"}, b.completesUntil(t, "next"))
}

// A worker promises keepalives and, against a broker that asks for them,
// sends a heartbeat at the broker's cadence even while it runs nothing (its
// own heartbeat cadence, an hour here, would say nothing for an hour), so
// the broker can tell a silent connection from an idle worker.
func TestServe_SendsKeepalivesWhenTheBrokerAsks(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.acks, b.keepaliveMs = true, 50
	startWorker(t, b, worker.Options{HeartbeatEvery: time.Hour}, okProvider())
	sub := b.next(t, "subscribe", isSubscribe).GetSubscribe()
	require.True(t, sub.GetKeepalive(), "the worker promises keepalives")
	for i := range 3 {
		hb := b.next(t, fmt.Sprintf("keepalive %d", i), func(m *workerv1.WorkStreamRequest) bool { return m.GetHeartbeat() != nil })
		require.Empty(t, hb.GetHeartbeat().GetTasks(), "an idle worker's keepalive lists no task")
	}
}

// resumedEpochs maps each task a Subscribe resumes to its claim epoch.
func resumedEpochs(sub *workerv1.Subscribe) map[string]int64 {
	out := map[string]int64{}
	for _, r := range sub.GetResumed() {
		out[r.GetTaskId()] = r.GetFence().GetClaimEpoch()
	}
	return out
}

// A resumed task carries the lease secret it was handed with — a running
// one's and a finished one's whose result awaits its ack — so the broker
// the worker reconnects to can verify that this worker holds it before it
// adopts its lease; heartbeats never carry secrets.
func TestServe_ResumedTasksCarryTheirLeaseSecrets(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.acks = true
	release := make(chan struct{})
	p := newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		if r.Resource.Name == "long" {
			<-release
		}
		return worker.Outcome{}, nil
	})
	startWorker(t, b, worker.Options{HeartbeatEvery: 10 * time.Millisecond}, p)
	t.Cleanup(func() { close(release) }) // before the worker's stop, which drains
	b.next(t, "subscribe", isSubscribe)
	secret := func(m *workerv1.StageTask, s string) *workerv1.StageTask {
		m.LeaseSecret = s
		return m
	}
	b.send(secret(task("done", "vpc", 7, 0), "secret-of-done"))
	require.Equal(t, []string{"done"}, b.completesUntil(t, "done"))
	b.send(secret(task("long", "vpc", 8, 0), "secret-of-long"))
	hb := b.next(t, "heartbeat", func(m *workerv1.WorkStreamRequest) bool { return len(m.GetHeartbeat().GetTasks()) > 0 })
	for _, r := range hb.GetHeartbeat().GetTasks() {
		require.Empty(t, r.GetLeaseSecret(), "a heartbeat carries no secret")
	}
	b.killStream()

	resub := b.next(t, "re-subscribe", isSubscribe).GetSubscribe()
	got := map[string]string{}
	for _, r := range resub.GetResumed() {
		got[r.GetTaskId()] = r.GetLeaseSecret()
	}
	require.Equal(t, map[string]string{"done": "secret-of-done", "long": "secret-of-long"}, got)
}
