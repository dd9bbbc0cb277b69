package broker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

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

// completionSink takes a worker's StageComplete.
type completionSink interface {
	complete(c *workerv1.StageComplete)
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
	metrics     *metrics.Metrics
	log         zerolog.Logger
	sessionSeq  atomic.Int64
}

var _ workerv1connect.WorkerServiceHandler = (*workerService)(nil)

// GetProviderConfig serves a kind's default providerconfig.
func (b *workerService) GetProviderConfig(ctx context.Context, req *connect.Request[workerv1.GetProviderConfigRequest]) (*connect.Response[workerv1.GetProviderConfigResponse], error) {
	kind := req.Msg.GetKind()
	if kind == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("kind is required"))
	}
	pc, ok, err := b.configs.DefaultProviderConfig(ctx, kind)
	if err != nil {
		b.log.Error().Err(err).Str("kind", kind).Msg("read default providerconfig")
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("providerconfig unavailable; retry"))
	}
	if !ok {
		return connect.NewResponse(&workerv1.GetProviderConfigResponse{}), nil
	}
	return connect.NewResponse(&workerv1.GetProviderConfigResponse{Found: true, Config: configProto(pc)}), nil
}

// WorkStream is one worker's session: subscribe, then tasks out and
// completions, readiness changes and heartbeats in.
func (b *workerService) WorkStream(ctx context.Context, stream *connect.BidiStream[workerv1.WorkStreamRequest, workerv1.WorkStreamResponse]) error {
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
	maxIn := int(sub.GetMaxInFlight())
	if maxIn <= 0 {
		maxIn = 16
	}
	s := &session{
		id:       fmt.Sprintf("%s#%d", sub.GetWorkerId(), b.sessionSeq.Add(1)),
		workerID: sub.GetWorkerId(),
		maxIn:    maxIn,
		out:      make(chan *workerv1.WorkStreamResponse, maxIn+16),
		done:     make(chan struct{}),
		ready:    readyMap(sub.GetKinds()),
	}
	log := b.log.With().Str("worker_id", s.workerID).Logger()
	var known []*workerv1.KindVersion
	for kv := range s.ready {
		if _, ok := b.kinds.Kind(kv); ok {
			known = append(known, &workerv1.KindVersion{Kind: kv.Kind, Version: kv.Version})
		} else {
			log.Warn().Str("kind", kv.String()).Msg("worker serves a kind with no applied manifest; it gets no work until one is applied")
		}
	}
	if err := stream.Send(&workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Subscribed{
		Subscribed: &workerv1.Subscribed{BrokerId: b.id, Known: known}}}); err != nil {
		return err
	}
	b.reg.add(s)
	b.metrics.Workers.Set(float64(b.reg.count()))
	log.Info().Int("kinds", len(s.ready)).Int("max_in_flight", maxIn).Int("resumed", len(sub.GetResumed())).Msg("worker connected")
	defer func() {
		b.reg.remove(s)
		close(s.done)
		b.metrics.Workers.Set(float64(b.reg.count()))
		log.Info().Msg("worker disconnected")
	}()

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sendErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-sctx.Done():
				sendErr <- nil
				return
			case m := <-s.out:
				if err := stream.Send(m); err != nil {
					sendErr <- err
					cancel()
					return
				}
			}
		}
	}()

	for {
		msg, err := stream.Receive()
		if err != nil {
			cancel()
			<-sendErr
			if sctx.Err() != nil && ctx.Err() == nil {
				return nil
			}
			return nil
		}
		switch m := msg.GetMsg().(type) {
		case *workerv1.WorkStreamRequest_Readiness:
			b.reg.setReady(s, m.Readiness.GetKinds())
		case *workerv1.WorkStreamRequest_Complete:
			b.completions.complete(m.Complete)
		case *workerv1.WorkStreamRequest_Heartbeat:
			// Leases of tasks this broker runs are heartbeated by the
			// dispatcher; nothing to do per worker beat.
		case *workerv1.WorkStreamRequest_Subscribe:
			log.Warn().Msg("duplicate subscribe on an open stream; ignored")
		}
	}
}

// RelayStage runs a peer's stage on a local worker.
func (b *workerService) RelayStage(ctx context.Context, req *connect.Request[workerv1.RelayStageRequest]) (*connect.Response[workerv1.RelayStageResponse], error) {
	t := req.Msg.GetTask()
	if t.GetTaskId() == "" || t.GetResource() == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("relay needs a task with an id and a resource"))
	}
	kv := manifest.KindVersion{Kind: t.GetResource().GetKind(), Version: t.GetResource().GetVersion()}
	if !b.reg.serves(kv) {
		return nil, connect.NewError(connect.CodeUnavailable, fmt.Errorf("no worker on broker %s serves %s", b.id, kv))
	}
	c, err := b.stages.dispatchLocal(ctx, kv, t)
	if err != nil {
		return nil, connect.NewError(connect.CodeUnavailable, err)
	}
	if c == nil {
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("worker lost mid-stage and did not redeliver"))
	}
	return connect.NewResponse(&workerv1.RelayStageResponse{Complete: c}), nil
}
