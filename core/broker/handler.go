package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"

	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
	"github.com/converge-run/converge/workerproto/gen/converge/worker/v1/workerv1connect"
)

// handlerStages is what the handler dispatches a relayed stage through.
type handlerStages interface {
	dispatchLocal(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error)
}

// completionSink takes a worker's StageComplete; it calls ack (once) when
// the broker has taken responsibility for the result.
type completionSink interface {
	complete(c *workerv1.StageComplete, ack func())
}

// workerService is the Connect WorkerService: workers' sessions
// (WorkStream), their config reads, and peers' relayed stages. It owns no
// loop; a session lives as long as its stream.
type workerService struct {
	id          string
	reg         *registry
	kinds       kindSource
	configs     defaultConfigs
	completions completionSink
	stages      handlerStages
	// relays counts relayed stages against this broker's per-pair cap
	// (nil: not counted).
	relays *inflight
	// adopt takes over the leases of tasks a worker resumes here (nil: none).
	adopt      *adoptions
	leases     *leaseKeys
	streamRate int // messages per second one worker stream may send (0: unpaced)
	// silence ends a keepalive session that sent nothing for this long
	// (WORKER_SILENCE_TIMEOUT; 0: never).
	silence    time.Duration
	metrics    *metrics.Metrics
	log        zerolog.Logger
	sessionSeq atomic.Int64
}

var _ workerv1connect.WorkerServiceHandler = (*workerService)(nil)

// GetProviderConfig serves a kind's default providerconfig.
func (h *workerService) GetProviderConfig(ctx context.Context, req *connect.Request[workerv1.GetProviderConfigRequest]) (*connect.Response[workerv1.GetProviderConfigResponse], error) {
	kind := req.Msg.GetKind()
	if kind == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("kind is required"))
	}
	if p := principalFrom(ctx); !p.Serves(kind) {
		return nil, connect.NewError(connect.CodePermissionDenied, fmt.Errorf("credential %s may not serve kind %s", p.Name, kind))
	}
	pc, ok, err := h.configs.DefaultProviderConfig(ctx, kind)
	if err != nil {
		h.log.Error().Err(err).Str("kind", kind).Msg("read default providerconfig")
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("providerconfig unavailable; retry"))
	}
	if !ok {
		return connect.NewResponse(&workerv1.GetProviderConfigResponse{}), nil
	}
	return connect.NewResponse(&workerv1.GetProviderConfigResponse{Found: true, Config: configProto(pc)}), nil
}

// workStream is the bidi stream of one worker session.
type workStream = connect.BidiStream[workerv1.WorkStreamRequest, workerv1.WorkStreamResponse]

// WorkStream is one worker's session: subscribe, then tasks out and
// completions, readiness changes and heartbeats in.
func (h *workerService) WorkStream(ctx context.Context, stream *workStream) error {
	first, err := stream.Receive()
	if err != nil {
		return err
	}
	sub := first.GetSubscribe()
	if sub == nil {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("the first message must be a Subscribe"))
	}
	if sub.GetWorkerId() == "" || len(sub.GetKinds()) == 0 {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("subscribe needs a worker_id and at least one kind"))
	}
	principal := principalFrom(ctx)
	if err := subscribeAllowed(principal, sub); err != nil {
		return err
	}
	maxIn := int(sub.GetMaxInFlight())
	if maxIn <= 0 {
		maxIn = 16
	}
	s := &session{
		id:       fmt.Sprintf("%s#%d", sub.GetWorkerId(), h.sessionSeq.Add(1)),
		workerID: sub.GetWorkerId(),
		holder:   holderOf(principal, sub.GetWorkerId()),
		maxIn:    maxIn,
		out:      make(chan *workerv1.WorkStreamResponse, maxIn+16),
		ackWake:  make(chan struct{}, 1),
		done:     make(chan struct{}),
		ready:    readyMap(sub.GetKinds()),
	}
	log := h.log.With().Str("worker_id", s.workerID).Logger()
	watch := h.silence > 0 && sub.GetKeepalive() && streamAbort(ctx) != nil
	subscribed := &workerv1.Subscribed{BrokerId: h.id, Known: h.known(s, log), AcksResults: true}
	if watch {
		subscribed.KeepaliveMs = keepaliveEvery(h.silence).Milliseconds()
	}
	if err := stream.Send(&workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Subscribed{
		Subscribed: subscribed}}); err != nil {
		return err
	}
	h.reg.add(s)
	h.metrics.Workers.Set(float64(h.reg.count()))
	log.Info().Str("identity", principal.Name).Str("auth", principal.Via).Int("kinds", len(s.ready)).Int("max_in_flight", maxIn).Int("resumed", len(sub.GetResumed())).Msg("worker connected")
	if h.adopt != nil && len(sub.GetResumed()) > 0 {
		go h.adopt.resumed(ctx, s, sub.GetResumed())
	}
	defer func() {
		if h.adopt != nil {
			defer h.adopt.ended(s)
		}
		h.reg.remove(s)
		close(s.done)
		h.metrics.Workers.Set(float64(h.reg.count()))
		log.Info().Msg("worker disconnected")
	}()
	h.serve(ctx, stream, s, watch, log)
	return nil
}

// known lists the kinds s serves that have an applied manifest.
func (h *workerService) known(s *session, log zerolog.Logger) []*workerv1.KindVersion {
	var known []*workerv1.KindVersion
	for kv := range s.ready {
		if _, ok := h.kinds.Kind(kv); ok {
			known = append(known, &workerv1.KindVersion{Kind: kv.Kind, Version: kv.Version})
		} else {
			log.Warn().Str("kind", kv.String()).Msg("worker serves a kind with no applied manifest; it gets no work until one is applied")
		}
	}
	return known
}

// serve runs an open session until its stream ends: one sender drains s.out
// and batches the session's result acks, the receive loop routes what the
// worker sends, and with watch a watchdog cuts the stream once the worker
// has been silent for the silence timeout.
func (h *workerService) serve(ctx context.Context, stream *workStream, s *session, watch bool, log zerolog.Logger) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var heard atomic.Int64
	heard.Store(time.Now().UnixNano())
	if watch {
		go silenceWatch(sctx, &heard, h.silence, streamAbort(ctx), log)
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for {
			select {
			case <-sctx.Done():
				return
			case m := <-s.out:
				if err := stream.Send(m); err != nil {
					cancel()
					return
				}
			case <-s.ackWake:
				ids := s.takeAcks()
				if len(ids) == 0 {
					continue
				}
				if err := stream.Send(&workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Ack{
					Ack: &workerv1.ResultAck{TaskIds: ids}}}); err != nil {
					cancel()
					return
				}
			}
		}
	}()
	pace := newStreamRate(h.streamRate)
	for {
		msg, err := stream.Receive()
		if err != nil || !pace.wait(sctx) {
			cancel()
			<-sent
			return
		}
		heard.Store(time.Now().UnixNano())
		switch m := msg.GetMsg().(type) {
		case *workerv1.WorkStreamRequest_Readiness:
			if !readinessAllowed(ctx, m.Readiness, log) {
				continue
			}
			h.reg.setReady(s, m.Readiness.GetKinds())
		case *workerv1.WorkStreamRequest_Complete:
			if !h.completionAllowed(s, m.Complete, log) {
				continue
			}
			id := m.Complete.GetTaskId()
			h.completions.complete(m.Complete, func() { s.ack(id) })
		case *workerv1.WorkStreamRequest_Heartbeat:
			// Leases of tasks this broker runs are heartbeated by the
			// dispatcher; a worker's beat (empty when it is idle) only
			// proves the session alive (heard, above).
		case *workerv1.WorkStreamRequest_Subscribe:
			log.Warn().Msg("duplicate subscribe on an open stream; ignored")
		}
	}
}

// RelayStage runs a peer's stage on a local worker.
func (h *workerService) RelayStage(ctx context.Context, req *connect.Request[workerv1.RelayStageRequest]) (*connect.Response[workerv1.RelayStageResponse], error) {
	t := req.Msg.GetTask()
	if t.GetTaskId() == "" || t.GetResource() == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("relay needs a task with an id and a resource"))
	}
	kv := manifest.KindVersion{Kind: t.GetResource().GetKind(), Version: t.GetResource().GetVersion()}
	if !h.reg.serves(kv) {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("no worker on broker %s serves %s", h.id, kv))
	}
	if id, err := parseTaskID(t.GetTaskId()); err == nil && h.relays != nil {
		done := h.relays.relay(pairKey{kv: kv, tt: id.key.TaskType})
		defer done()
	}
	c, err := h.stages.dispatchLocal(ctx, kv, t)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if c == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("worker lost mid-stage and did not redeliver"))
	}
	return connect.NewResponse(&workerv1.RelayStageResponse{Complete: c}), nil
}
