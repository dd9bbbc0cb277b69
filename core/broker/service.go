package broker

import (
	"context"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// GetProviderConfig serves a kind's default providerconfig.
func (b *Broker) GetProviderConfig(ctx context.Context, req *connect.Request[workerv1.GetProviderConfigRequest]) (*connect.Response[workerv1.GetProviderConfigResponse], error) {
	kind := req.Msg.GetKind()
	if kind == "" {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("kind is required"))
	}
	pc, ok, err := b.Store.DefaultProviderConfig(ctx, kind)
	if err != nil {
		b.Log.Error().Err(err).Str("kind", kind).Msg("read default providerconfig")
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("providerconfig unavailable; retry"))
	}
	if !ok {
		return connect.NewResponse(&workerv1.GetProviderConfigResponse{}), nil
	}
	return connect.NewResponse(&workerv1.GetProviderConfigResponse{Found: true, Config: configProto(pc)}), nil
}

// WorkStream is one worker's session: subscribe, then tasks out and
// completions, readiness changes and heartbeats in.
func (b *Broker) WorkStream(ctx context.Context, stream *connect.BidiStream[workerv1.WorkStreamRequest, workerv1.WorkStreamResponse]) error {
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
	log := b.Log.With().Str("worker_id", s.workerID).Logger()
	snap := b.Kinds.Snapshot()
	var known []*workerv1.KindVersion
	for kv := range s.ready {
		if _, ok := snap.Get(kv); ok {
			known = append(known, &workerv1.KindVersion{Kind: kv.Kind, Version: kv.Version})
		} else {
			log.Warn().Str("kind", kv.String()).Msg("worker serves a kind with no applied manifest; it gets no work until one is applied")
		}
	}
	if err := stream.Send(&workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Subscribed{
		Subscribed: &workerv1.Subscribed{BrokerId: b.ID, Known: known}}}); err != nil {
		return err
	}
	b.reg.add(s)
	b.Metrics.Workers.Set(float64(b.reg.count()))
	log.Info().Int("kinds", len(s.ready)).Int("max_in_flight", maxIn).Int("resumed", len(sub.GetResumed())).Msg("worker connected")
	defer func() {
		b.reg.remove(s)
		close(s.done)
		b.Metrics.Workers.Set(float64(b.reg.count()))
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
			b.complete(m.Complete)
		case *workerv1.WorkStreamRequest_Heartbeat:
			// Leases of tasks this broker runs are heartbeated by the
			// dispatcher; nothing to do per worker beat.
		case *workerv1.WorkStreamRequest_Subscribe:
			log.Warn().Msg("duplicate subscribe on an open stream; ignored")
		}
	}
}

// send queues a message for s, failing when its stream has ended.
func (s *session) send(ctx context.Context, m *workerv1.WorkStreamResponse) error {
	select {
	case s.out <- m:
		return nil
	case <-s.done:
		return errWorkerGone
	case <-ctx.Done():
		return ctx.Err()
	}
}

var errWorkerGone = errors.New("worker disconnected")

// pushConfig sends kind's default config to every session serving it.
func (b *Broker) pushConfig(ctx context.Context, kind string, push *workerv1.ConfigPush) {
	for _, s := range b.reg.serving(kind) {
		if err := s.send(ctx, &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Config{Config: push}}); err != nil {
			b.Log.Debug().Err(err).Str("worker_id", s.workerID).Str("kind", kind).Msg("config push skipped")
		}
	}
}
