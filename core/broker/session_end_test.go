package broker

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/workerproto"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// The planned ends of a worker's session: the broker's drain has ended, or
// the session reached WORKER_SESSION_MAX_AGE.

// Once the broker's drain has ended, its sessions end with Unavailable after
// the acks still queued (queued without a wake here, so only the session's
// end sends them) — a session running a stage (a peer's relay) only once the
// stage is done — and a new session is refused before it registers: the
// workers reconnect elsewhere at once.
func TestWorkerServiceWorkStream_EndsSessionsWhenTheBrokerHasDrained(t *testing.T) {
	t.Parallel()
	b := setupHandler(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type stream = *connect.BidiStreamForClient[workerv1.WorkStreamRequest, workerv1.WorkStreamResponse]
	streams := map[string]stream{}
	for proto, c := range b.clients() {
		st := c.WorkStream(ctx)
		require.NoError(t, st.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{
			Subscribe: &workerv1.Subscribe{WorkerId: proto, Kinds: readiness("vpc")}}}))
		_, err := st.Receive()
		require.NoError(t, err, proto)
		streams[proto] = st
	}
	require.Eventually(t, func() bool { return b.svc.reg.count() == len(streams) }, 5*time.Second, time.Millisecond)
	var busy *session // the gRPC worker's session runs a stage
	b.svc.reg.mu.Lock()
	for _, s := range b.svc.reg.sessions {
		s.ackMu.Lock()
		s.acks = append(s.acks, "t-"+s.workerID)
		s.ackMu.Unlock()
		if s.workerID == "GRPC" {
			busy = s
			s.inFlight++
		}
	}
	b.svc.reg.mu.Unlock()
	ended := func(proto string) {
		t.Helper()
		resp, err := streams[proto].Receive()
		require.NoError(t, err, proto)
		require.Equal(t, []string{"t-" + proto}, resp.GetAck().GetTaskIds(), "%s: the queued ack is sent before the end", proto)
		_, err = streams[proto].Receive()
		require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%s: %v", proto, err)
		require.Contains(t, err.Error(), "drained", proto)
	}

	b.svc.reg.closeRouting() // as the broker does, then closing
	close(b.closing)
	busyEnded := make(chan struct{})
	go func() { defer close(busyEnded); ended("GRPC") }()
	ended("Connect")
	require.Eventually(t, func() bool { return b.svc.reg.count() == 1 }, 5*time.Second, time.Millisecond)
	select {
	case <-busyEnded:
		t.Fatal("a session running a stage ended before the stage finished")
	default:
	}
	b.svc.reg.release(busy)
	select {
	case <-busyEnded:
	case <-ctx.Done():
		t.Fatal("the busy session did not end once its stage finished")
	}
	require.Eventually(t, func() bool { return b.svc.reg.count() == 0 }, 5*time.Second, time.Millisecond)
	for _, st := range streams {
		_ = st.CloseRequest()
		_ = st.CloseResponse()
	}

	for proto, c := range b.clients() {
		late := c.WorkStream(ctx)
		require.NoError(t, late.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{
			Subscribe: &workerv1.Subscribe{WorkerId: "late-" + proto, Kinds: readiness("vpc")}}}))
		_, err := late.Receive()
		require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%s: a session after the drain is refused: %v", proto, err)
		_ = late.CloseRequest()
		_ = late.CloseResponse()
	}
	require.Zero(t, b.svc.reg.count(), "a refused session never registers")
}

// A session past its maximum age is retired — routed nothing new — and ends with Unavailable once the stage it
// runs has finished, so the worker reconnects, maybe to a broker added since.
func TestWorkerServiceWorkStream_EndsASessionAtItsMaxAge(t *testing.T) {
	t.Parallel()
	const age = 300 * time.Millisecond
	b := setupHandlerAuth(t, nil, func(s *workerService) { s.maxAge = age })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream := b.clients()["Connect"].WorkStream(ctx)
	opened := time.Now()
	_, s := b.openSession(t, stream, &workerv1.Subscribe{WorkerId: "w1", Kinds: readiness("vpc")})
	busy, _ := b.svc.reg.acquireOrWait(kvVPC) // a stage the session runs
	require.Same(t, s, busy)

	require.Eventually(t, func() bool { return b.svc.reg.retiredFor(s) != nil }, 5*time.Second, time.Millisecond)
	require.GreaterOrEqual(t, time.Since(opened), age-age/10, "retired at its age, less the jitter")
	require.NoError(t, stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Heartbeat{
		Heartbeat: &workerv1.Heartbeat{}}}), "a retired session still reads until it ends")
	require.False(t, b.svc.reg.serves(kvVPC), "a retired session is routed nothing")
	require.Never(t, func() bool { return b.svc.reg.count() == 0 }, 100*time.Millisecond, 5*time.Millisecond,
		"a session running a stage is not ended")

	b.svc.reg.release(busy) // its stage finishes
	_, err := stream.Receive()
	require.Equal(t, connect.CodeUnavailable, connect.CodeOf(err), "%v", err)
	require.Contains(t, err.Error(), workerproto.PlannedSessionEnd+": the session reached WORKER_SESSION_MAX_AGE")
	require.Eventually(t, func() bool { return b.svc.reg.count() == 0 }, 5*time.Second, time.Millisecond)
	_ = stream.CloseRequest()
	_ = stream.CloseResponse()
}
