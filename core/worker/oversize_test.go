package worker_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/worker"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// TestServe_AnOversizedResultFailsItsTaskAndOthersStillFlow: a handler's
// outcome that cannot fit one message (Options.MaxMessageBytes) is sent as
// its task's terminal failure naming the limit, and the results after it
// are delivered. Sent as it was, it failed its send, ended the session and
// was sent again on every session after (483 sessions in 20 s here), the
// results behind it never delivered.
func TestServe_AnOversizedResultFailsItsTaskAndOthersStillFlow(t *testing.T) {
	t.Parallel()
	for name, batches := range map[string]bool{"batched": true, "one by one": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := newScriptBroker(t)
			b.acks, b.batches = true, batches
			p := newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
				if r.Resource.Name == "big" {
					return worker.Outcome{Status: json.RawMessage(`{"blob":"` + strings.Repeat("x", 256<<10) + `"}`)}, nil
				}
				return worker.Outcome{Status: json.RawMessage(`{"ok":true}`)}, nil
			})
			startWorker(t, b, worker.Options{MaxMessageBytes: 64 << 10}, p)
			b.next(t, "subscribe", isSubscribe)

			b.send(task("big", "vpc", 1, 0))
			m := b.next(t, "the oversized task's failure", carries("big"))
			var got *workerv1.StageComplete
			for _, c := range append(m.GetCompletes().GetCompletes(), m.GetComplete()) {
				if c.GetTaskId() == "big" {
					got = c
				}
			}
			require.NotNil(t, got.GetError(), "an outcome past the message limit is a failure, not an outcome the stream cannot carry")
			require.Contains(t, got.GetError().GetMessage(), "WORKER_MAX_MESSAGE_BYTES")
			require.True(t, got.GetError().GetTerminal(), "the same input makes the same outcome: retrying cannot fix it")
			require.Equal(t, int64(1), got.GetFence().GetClaimEpoch(), "the failure answers the task's claim")
			b.ack("big")

			b.send(task("small", "vpc", 2, 0))
			b.next(t, "the next task's result", carries("small"))
			b.ack("small")
		})
	}
}

// TestServe_ABatchOfResultsStaysWithinTheMessageLimit: results that each
// fit one message, held back together while an ack is awaited, go out in
// batches that fit it too. A batch was bounded by its own 1 MiB only: over
// a smaller limit its send failed, the session ended, and the next one
// sent the same batch again, forever.
func TestServe_ABatchOfResultsStaysWithinTheMessageLimit(t *testing.T) {
	t.Parallel()
	b := newScriptBroker(t)
	b.acks, b.batches = true, true
	release := make(chan struct{})
	p := newProvider("vpc", func(_ context.Context, r worker.Request) (worker.Outcome, error) {
		if r.Resource.Name != "first" {
			<-release
		}
		return worker.Outcome{Status: json.RawMessage(`{"blob":"` + strings.Repeat("x", 3<<10) + `"}`)}, nil
	})
	startWorker(t, b, worker.Options{MaxMessageBytes: 8 << 10}, p)
	b.next(t, "subscribe", isSubscribe)
	b.send(task("first", "vpc", 1, 0))
	b.next(t, "the first result", carries("first")) // not acked: what follows is held back
	names := []string{"a", "b", "c", "d", "e", "f"}
	for i, n := range names {
		b.send(task(n, "vpc", int64(i+2), 0))
	}
	close(release)
	seen := map[string]bool{}
	for len(seen) < len(names) {
		m := b.next(t, "the held results", func(m *workerv1.WorkStreamRequest) bool { return m.GetSubscribe() == nil })
		for _, c := range append(m.GetCompletes().GetCompletes(), m.GetComplete()) {
			if c.GetTaskId() != "" && c.GetTaskId() != "first" {
				seen[c.GetTaskId()] = true
			}
		}
	}
	b.ack(append([]string{"first"}, names...)...)
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Equal(t, 1, b.sessions, "the batches never broke the session")
}
