package worker

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

type nopProvider struct{}

func (nopProvider) Kind() manifest.KindVersion {
	return manifest.KindVersion{Kind: "vpc", Version: "v1"}
}
func (nopProvider) Work(context.Context, Request) (Outcome, error) { return Outcome{}, nil }
func (nopProvider) OnConfig(ProviderConfig)                        {}
func (nopProvider) Ready() bool                                    { return true }

// fakeStream records what flush sends; failAfter > 0 fails sends past it.
type fakeStream struct {
	sent      []string
	failAfter int
}

func (f *fakeStream) send(m *workerv1.WorkStreamRequest) error {
	if f.failAfter > 0 && len(f.sent) >= f.failAfter {
		return errors.New("stream closed")
	}
	f.sent = append(f.sent, m.GetComplete().GetTaskId())
	return nil
}

func newTestWorker(t *testing.T, buffer int) *Worker {
	t.Helper()
	w, err := New("http://127.0.0.1:1", Options{BufferSize: buffer}, nopProvider{})
	require.NoError(t, err)
	return w
}

func result(id string) *workerv1.StageComplete { return &workerv1.StageComplete{TaskId: id} }

// The pending buffer from the SDK's side of a stream, one case per way a
// session can go: what each flush sends, what stays pending.
func TestWorkerFlush_KeepsSentResultsUntilAcked(t *testing.T) {
	t.Parallel()
	t.Run("SendSucceedsButTheConnectionDiesBeforeTheAck", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 8)
		w.deliver(result("a"))
		s1 := &fakeStream{}
		require.NoError(t, w.flush(s1.send, true))
		require.Equal(t, []string{"a"}, s1.sent)
		require.Equal(t, 1, w.pendingCount(), "sent but unacked: still pending")
		require.NoError(t, w.flush(s1.send, true))
		require.Equal(t, []string{"a"}, s1.sent, "not resent on the same session")

		require.Equal(t, 1, w.resend(), "the next session redelivers it")
		s2 := &fakeStream{}
		require.NoError(t, w.flush(s2.send, true))
		require.Equal(t, []string{"a"}, s2.sent)
		w.acked([]string{"a"})
		require.Zero(t, w.pendingCount(), "acked: dropped")
	})
	t.Run("AFailedSendIsResentNextSession", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 8)
		w.deliver(result("a"))
		w.deliver(result("b"))
		s1 := &fakeStream{failAfter: 1}
		require.Error(t, w.flush(s1.send, true))
		w.acked([]string{"a", "b"}) // b was never sent: its ack (from nowhere) settles nothing
		require.Equal(t, 1, w.pendingCount())
		w.resend()
		s2 := &fakeStream{}
		require.NoError(t, w.flush(s2.send, true))
		require.Equal(t, []string{"b"}, s2.sent)
	})
	t.Run("EachAckSettlesOneCopy", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 8)
		w.deliver(result("a")) // a task re-dispatched under the same id ran twice
		w.deliver(result("a"))
		s := &fakeStream{}
		require.NoError(t, w.flush(s.send, true))
		w.acked([]string{"a"})
		require.Equal(t, 1, w.pendingCount())
		w.acked([]string{"a"})
		require.Zero(t, w.pendingCount())
	})
	t.Run("FullBufferDiscardsTheOldestSentOrNot", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 2)
		w.deliver(result("a"))
		s := &fakeStream{}
		require.NoError(t, w.flush(s.send, true))
		w.deliver(result("b"))
		w.deliver(result("c")) // discards a, sent and unacked
		require.Equal(t, int64(1), w.Dropped())
		require.NoError(t, w.flush(s.send, true))
		require.Equal(t, []string{"a", "b", "c"}, s.sent, "b and c still go out on this session")
		w.resend()
		s2 := &fakeStream{}
		require.NoError(t, w.flush(s2.send, true))
		require.Equal(t, []string{"b", "c"}, s2.sent)
	})
	t.Run("BrokerWithoutAcksSettlesOnSend", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 8)
		w.deliver(result("a"))
		s := &fakeStream{}
		require.NoError(t, w.flush(s.send, false))
		require.Zero(t, w.pendingCount())
	})
}
