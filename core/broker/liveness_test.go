package broker

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// subscribe opens a session for workerID over a real Connect client and
// returns its stream and the broker's Subscribed.
func subscribe(ctx context.Context, t *testing.T, c workerv1connect.WorkerServiceClient, workerID string, keepalive bool) (
	*workStreamClient, *workerv1.Subscribed) {
	t.Helper()
	stream := c.WorkStream(ctx)
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{
		Subscribe: &workerv1.Subscribe{WorkerId: workerID, Kinds: readiness("vpc"), Keepalive: keepalive}}}))
	resp, err := stream.Receive()
	require.NoError(t, err)
	require.NotNil(t, resp.GetSubscribed())
	return stream, resp.GetSubscribed()
}

type workStreamClient = connect.BidiStreamForClient[workerv1.WorkStreamRequest, workerv1.WorkStreamResponse]

// A keepalive worker that stops sending (its process frozen, its
// connection half-open: the transport still answers HTTP/2 pings) loses
// its session once it has been silent for the silence timeout, so its
// stages are re-dispatched as for a dead worker; one that heartbeats keeps
// its session, and an older worker that never promised keepalives is never
// timed out.
func TestWorkerServiceWorkStream_EndsASilentKeepaliveSession(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	b.svc.silence = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := b.clients()["Connect"]

	started := time.Now()
	silent, sub := subscribe(ctx, t, c, "silent", true)
	require.Equal(t, int64(666), sub.GetKeepaliveMs(), "a keepalive worker is asked to send every third of the timeout")
	beating, _ := subscribe(ctx, t, c, "beating", true)
	old, oldSub := subscribe(ctx, t, c, "old", false)
	require.Zero(t, oldSub.GetKeepaliveMs(), "an older worker is asked for nothing")
	require.Eventually(t, func() bool { return b.svc.reg.count() == 3 }, 10*time.Second, 5*time.Millisecond)

	stopBeats := make(chan struct{})
	beatsDone := make(chan error, 1)
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopBeats:
				beatsDone <- nil
				return
			case <-tick.C:
				if err := beating.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Heartbeat{
					Heartbeat: &workerv1.Heartbeat{}}}); err != nil {
					beatsDone <- err
					return
				}
			}
		}
	}()

	_, err := silent.Receive()
	require.Error(t, err, "the broker ends the silent session")
	require.GreaterOrEqual(t, time.Since(started), b.svc.silence, "not before the silence timeout")
	require.Eventually(t, func() bool { return b.svc.reg.count() == 2 }, 10*time.Second, 5*time.Millisecond,
		"the silent session is unregistered: its stages see it lost")
	// The other two outlive the silent one by another timeout.
	time.Sleep(b.svc.silence + time.Second) // proving an absence: nothing ends them over a whole timeout
	require.Equal(t, 2, b.svc.reg.count(), "the heartbeating and the older worker keep their sessions")
	close(stopBeats)
	require.NoError(t, <-beatsDone)
	for _, s := range []*workStreamClient{silent, beating, old} {
		_ = s.CloseRequest()
		_ = s.CloseResponse()
	}
}

// An abort cuts its stream while the handler runs, and does nothing once
// the handler returned. The watchdog can fire just as its session ends; by
// then HTTP/2 has freed the response writer's state for another stream, so
// a late deadline would dereference nil (the panic CI once hit) or cut an
// unrelated stream. (The abort of a real HTTP/2 stream is proven by the
// silent-session test above.)
func TestWithStreamAbort_AnAbortAfterTheHandlerReturnedDoesNothing(t *testing.T) {
	t.Parallel()
	w := &deadlineWriter{ResponseWriter: httptest.NewRecorder()}
	var abort func()
	withStreamAbort(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		abort = streamCutOf(r.Context()).abort
		abort()
	})).ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", nil))
	require.Equal(t, []string{"read", "write"}, w.cut, "while the handler runs, both directions are cut")
	abort()
	require.Equal(t, []string{"read", "write"}, w.cut, "after it returned, nothing reaches the writer")
}

// deadlineWriter records the deadlines http.ResponseController sets on it.
type deadlineWriter struct {
	http.ResponseWriter
	cut []string
}

func (w *deadlineWriter) SetReadDeadline(time.Time) error {
	w.cut = append(w.cut, "read")
	return nil
}

func (w *deadlineWriter) SetWriteDeadline(time.Time) error {
	w.cut = append(w.cut, "write")
	return nil
}

// The time the broker spends handling a worker's message (writing a
// redelivered result on a slow database, releasing a refused result's
// lease) is the broker's, not the worker's silence: a heartbeating worker
// keeps its session however long that takes, and the watchdog times it
// from when the broker listens again — a worker that then falls silent is
// still cut.
func TestWorkerServiceWorkStream_HandlingTimeIsNotWorkerSilence(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	b.svc.silence = time.Second
	entered, release := make(chan struct{}), make(chan struct{})
	b.sink.CompleteFn = func(_ *workerv1.StageComplete, ack func()) {
		close(entered)
		<-release // the result's write on a frozen database
		ack()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stream, _ := subscribe(ctx, t, b.clients()["Connect"], "busy", true)
	t.Cleanup(func() {
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	})
	require.Eventually(t, func() bool { return b.svc.reg.count() == 1 }, 10*time.Second, 5*time.Millisecond)
	tid := "v1|0|00000000-0000-0000-0000-000000000001|reconcile|00000000-0000-0000-0000-000000000000|1|1|STAGE_WORK|1|"
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Complete{Complete: &workerv1.StageComplete{
		TaskId: tid, LeaseSecret: b.secret("busy", tid)}}}))

	stopBeats, beatsDone := make(chan struct{}), make(chan error, 1)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopBeats:
				beatsDone <- nil
				return
			case <-tick.C:
				if err := stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Heartbeat{Heartbeat: &workerv1.Heartbeat{}}}); err != nil {
					beatsDone <- err
					return
				}
			}
		}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the result never reached the completions")
	}
	time.Sleep(3 * b.svc.silence) // proving an absence: three timeouts spent handling one message
	require.Equal(t, 1, b.svc.reg.count(), "a heartbeating worker keeps its session while the broker handles its result")
	close(release)
	resp, err := stream.Receive()
	require.NoError(t, err)
	require.Equal(t, []string{tid}, resp.GetAck().GetTaskIds(), "the result is acked once handled")
	time.Sleep(2 * b.svc.silence) // the beats that queued meanwhile, and those after, are heard
	require.Equal(t, 1, b.svc.reg.count(), "the session outlives the handling by two more timeouts")

	close(stopBeats)
	require.NoError(t, <-beatsDone)
	silentFrom := time.Now()
	_, err = stream.Receive()
	require.Error(t, err, "a worker silent once the broker listens again is still cut")
	require.GreaterOrEqual(t, time.Since(silentFrom), b.svc.silence/2)
	require.Eventually(t, func() bool { return b.svc.reg.count() == 0 }, 10*time.Second, 5*time.Millisecond)
}
