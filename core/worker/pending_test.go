package worker

import (
	"context"
	"errors"
	"testing"
	"time"

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

// fakeStream records what a flush sends: the task ids in order (sent) and
// per message (msgs); failAfter > 0 fails sends once that many messages
// went out, closed fails every send.
type fakeStream struct {
	sent      []string
	msgs      [][]string
	failAfter int
	closed    bool
}

func (f *fakeStream) send(m *workerv1.WorkStreamRequest) error {
	if f.closed || (f.failAfter > 0 && len(f.msgs) >= f.failAfter) {
		return errors.New("stream closed")
	}
	var ids []string
	if c := m.GetComplete(); c != nil {
		ids = append(ids, c.GetTaskId())
	}
	for _, c := range m.GetCompletes().GetCompletes() {
		ids = append(ids, c.GetTaskId())
	}
	f.msgs = append(f.msgs, ids)
	f.sent = append(f.sent, ids...)
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
		require.NoError(t, errOf(w.flushOneByOne(s1.send, true)))
		require.Equal(t, []string{"a"}, s1.sent)
		require.Equal(t, 1, w.pendingCount(), "sent but unacked: still pending")
		require.NoError(t, errOf(w.flushOneByOne(s1.send, true)))
		require.Equal(t, []string{"a"}, s1.sent, "not resent on the same session")

		require.Equal(t, 1, w.resend(), "the next session redelivers it")
		s2 := &fakeStream{}
		require.NoError(t, errOf(w.flushOneByOne(s2.send, true)))
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
		require.Error(t, errOf(w.flushOneByOne(s1.send, true)))
		w.acked([]string{"a", "b"}) // b was never sent: its ack (from nowhere) settles nothing
		require.Equal(t, 1, w.pendingCount())
		w.resend()
		s2 := &fakeStream{}
		require.NoError(t, errOf(w.flushOneByOne(s2.send, true)))
		require.Equal(t, []string{"b"}, s2.sent)
	})
	t.Run("EachAckSettlesOneCopy", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 8)
		w.deliver(result("a")) // a task re-dispatched under the same id ran twice
		w.deliver(result("a"))
		s := &fakeStream{}
		require.NoError(t, errOf(w.flushOneByOne(s.send, true)))
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
		require.NoError(t, errOf(w.flushOneByOne(s.send, true)))
		w.deliver(result("b"))
		w.deliver(result("c")) // discards a, sent and unacked
		require.Equal(t, int64(1), w.Dropped())
		require.NoError(t, errOf(w.flushOneByOne(s.send, true)))
		require.Equal(t, []string{"a", "b", "c"}, s.sent, "b and c still go out on this session")
		w.resend()
		s2 := &fakeStream{}
		require.NoError(t, errOf(w.flushOneByOne(s2.send, true)))
		require.Equal(t, []string{"b", "c"}, s2.sent)
	})
	t.Run("BrokerWithoutAcksSettlesOnSend", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 8)
		w.deliver(result("a"))
		s := &fakeStream{}
		require.NoError(t, errOf(w.flushOneByOne(s.send, false)))
		require.Zero(t, w.pendingCount())
	})
}

// Against a broker that takes batches, one flush sends every pending
// result not yet sent in as few messages as the bounds allow; acks and
// redelivery work per result, exactly as one by one.
func TestWorkerFlushBatched_SendsWhatIsPendingInOneMessage(t *testing.T) {
	t.Parallel()
	t.Run("OneMessageThenAcksPerResult", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 8)
		for _, id := range []string{"a", "b", "c"} {
			w.deliver(result(id))
		}
		s := &fakeStream{}
		require.NoError(t, errOf(w.flushBatched(s.send, true)))
		require.Equal(t, [][]string{{"a", "b", "c"}}, s.msgs)
		w.acked([]string{"a", "c"})
		require.Equal(t, 1, w.pendingCount(), "b is still unacked")
		w.deliver(result("d"))
		w.lingerSince(time.Hour) // d waited its linger: it goes, b's ack or not
		require.NoError(t, errOf(w.flushBatched(s.send, true)))
		require.Equal(t, [][]string{{"a", "b", "c"}, {"d"}}, s.msgs, "only the unsent result goes out")

		require.Equal(t, 2, w.resend())
		s2 := &fakeStream{}
		require.NoError(t, errOf(w.flushBatched(s2.send, true)))
		require.Equal(t, [][]string{{"b", "d"}}, s2.msgs, "the next session redelivers what is unacked")
	})
	t.Run("AFailedBatchIsResentWhole", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 8)
		w.deliver(result("a"))
		w.deliver(result("b"))
		s1 := &fakeStream{closed: true}
		require.Error(t, errOf(w.flushBatched(s1.send, true)))
		require.Equal(t, 2, w.resend())
		s2 := &fakeStream{}
		require.NoError(t, errOf(w.flushBatched(s2.send, true)))
		require.Equal(t, [][]string{{"a", "b"}}, s2.msgs)
	})
	t.Run("BatchesAreBounded", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 2*maxResultBatch)
		for range maxResultBatch + 1 {
			w.deliver(result("x"))
		}
		s := &fakeStream{}
		require.NoError(t, errOf(w.flushBatched(s.send, true)))
		require.Len(t, s.msgs, 2)
		require.Len(t, s.msgs[0], maxResultBatch)
		require.Len(t, s.msgs[1], 1)
	})
	t.Run("TheAckSettlesTheOldestCopy", func(t *testing.T) {
		t.Parallel()
		w := newTestWorker(t, 8)
		first, second := result("a"), result("a")
		w.deliver(first)
		w.deliver(second)
		require.NoError(t, errOf(w.flushBatched((&fakeStream{}).send, true)))
		w.acked([]string{"a"})
		w.mu.Lock()
		defer w.mu.Unlock()
		require.Len(t, w.pending, 1)
		require.Same(t, second, w.pending[0])
		require.Equal(t, 1, w.sent)
	})
}

// While results sent earlier await their ack, new ones wait to share a
// message: until the ack, a full batch, or their linger, whichever is
// first. With nothing awaiting an ack a result goes at once.
func TestWorkerFlushBatched_HoldsResultsWhileAnAckIsOutstanding(t *testing.T) {
	t.Parallel()
	newLingering := func(t *testing.T) *Worker {
		t.Helper()
		w, err := New("http://127.0.0.1:1", Options{BufferSize: 4 * maxResultBatch, ResultLinger: time.Hour}, nopProvider{})
		require.NoError(t, err)
		return w
	}
	// inFlight is a lingering worker whose results ids went out in one
	// message and await their ack, and the stream they went out on.
	inFlight := func(t *testing.T, ids ...string) (*Worker, *fakeStream) {
		t.Helper()
		w := newLingering(t)
		for _, id := range ids {
			w.deliver(result(id))
		}
		s := &fakeStream{}
		require.NoError(t, errOf(w.flushBatched(s.send, true)))
		require.Equal(t, [][]string{ids}, s.msgs)
		return w, s
	}
	t.Run("NothingAwaitingAnAckGoesAtOnce", func(t *testing.T) {
		t.Parallel()
		w := newLingering(t)
		w.deliver(result("a"))
		s := &fakeStream{}
		wait, err := w.flushBatched(s.send, true)
		require.NoError(t, err)
		require.Zero(t, wait)
		require.Equal(t, [][]string{{"a"}}, s.msgs)
	})
	t.Run("HeldUntilTheAckThenOneMessage", func(t *testing.T) {
		t.Parallel()
		w, s := inFlight(t, "a")
		w.deliver(result("b"))
		w.deliver(result("c"))
		wait, err := w.flushBatched(s.send, true)
		require.NoError(t, err)
		require.Positive(t, wait, "a awaits its ack: b and c wait")
		require.LessOrEqual(t, wait, time.Hour)
		require.Equal(t, [][]string{{"a"}}, s.msgs)

		drainWake(w)
		w.acked([]string{"a"})
		select {
		case <-w.wake:
		default:
			t.Fatal("the ack that leaves nothing awaiting must wake the session")
		}
		wait, err = w.flushBatched(s.send, true)
		require.NoError(t, err)
		require.Zero(t, wait)
		require.Equal(t, [][]string{{"a"}, {"b", "c"}}, s.msgs)
	})
	t.Run("APartialAckKeepsHolding", func(t *testing.T) {
		t.Parallel()
		w, s := inFlight(t, "a", "b")
		w.deliver(result("c"))
		drainWake(w)
		w.acked([]string{"a"}) // b still awaits its ack
		select {
		case <-w.wake:
			t.Fatal("woken while b still awaits its ack")
		default:
		}
		wait, err := w.flushBatched(s.send, true)
		require.NoError(t, err)
		require.Positive(t, wait)
		require.Equal(t, [][]string{{"a", "b"}}, s.msgs)
	})
	t.Run("AFullBatchGoesWithoutWaiting", func(t *testing.T) {
		t.Parallel()
		w, s := inFlight(t, "first")
		for range maxResultBatch {
			w.deliver(result("x"))
		}
		wait, err := w.flushBatched(s.send, true)
		require.NoError(t, err)
		require.Zero(t, wait)
		require.Len(t, s.msgs, 2)
		require.Len(t, s.msgs[1], maxResultBatch)
	})
	t.Run("AResultFinishedDuringASendIsHeld", func(t *testing.T) {
		t.Parallel()
		w := newLingering(t)
		w.deliver(result("a"))
		drainWake(w)
		s := &fakeStream{}
		// b finishes while a's message is being written: the broker may
		// already hold a, so b awaits a's ack like any later result.
		during := func(m *workerv1.WorkStreamRequest) error {
			if len(s.msgs) == 0 {
				w.deliver(result("b"))
			}
			return s.send(m)
		}
		wait, err := w.flushBatched(during, true)
		require.NoError(t, err)
		require.Zero(t, wait)
		require.Equal(t, [][]string{{"a"}}, s.msgs, "b did not ride on a's flush")
		select {
		case <-w.wake:
		default:
			t.Fatal("b's delivery must wake the session")
		}
		wait, err = w.flushBatched(s.send, true)
		require.NoError(t, err)
		require.Positive(t, wait, "a awaits its ack: b waits")
		require.Equal(t, [][]string{{"a"}}, s.msgs)
	})
	t.Run("TheLingerCountsFromTheOldestHeldResult", func(t *testing.T) {
		t.Parallel()
		w, s := inFlight(t, "a")
		w.deliver(result("b"))
		w.lingerSince(time.Hour - time.Minute)
		w.deliver(result("c")) // a later result does not restart b's linger
		wait, err := w.flushBatched(s.send, true)
		require.NoError(t, err)
		require.LessOrEqual(t, wait, time.Minute)
		require.Positive(t, wait)
		w.lingerSince(time.Hour)
		wait, err = w.flushBatched(s.send, true)
		require.NoError(t, err)
		require.Zero(t, wait)
		require.Equal(t, [][]string{{"a"}, {"b", "c"}}, s.msgs)
	})
}

// lingerSince backdates the oldest held result's delivery by d.
func (w *Worker) lingerSince(d time.Duration) {
	w.mu.Lock()
	w.unsentSince = time.Now().Add(-d)
	w.mu.Unlock()
}

func drainWake(w *Worker) {
	select {
	case <-w.wake:
	default:
	}
}

// errOf drops a flush's linger, for the cases that only check what went out.
func errOf(_ time.Duration, err error) error { return err }
