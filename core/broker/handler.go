package broker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/core/auth"
	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/tlsreload"

	"github.com/converge-run/converge/workerproto"
	"github.com/converge-run/converge/workerproto/composecols"
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
	// maxMessageBytes is the largest message the handler reads
	// (WORKER_MAX_MESSAGE_BYTES), told to each worker in its Subscribed
	// (0: not told).
	maxMessageBytes int
	// maxInFlight is the largest max_in_flight a Subscribe may ask for
	// (WORKER_MAX_IN_FLIGHT; 0: DefaultMaxInFlight).
	maxInFlight int
	// silence ends a keepalive session that sent nothing for this long
	// (WORKER_SILENCE_TIMEOUT; 0: never).
	silence time.Duration
	// closing is closed when the broker's drain has ended (nil: never),
	// after the registry stopped routing (closeRouting). Each session then
	// ends once its running stages have finished, acks sent, with
	// Unavailable, and new ones are refused: the workers reconnect to
	// another broker at once, instead of idling on this one until the
	// listener's shutdown grace cuts them.
	closing <-chan struct{}
	// relaysCut ends when the drain budget is spent with relayed stages
	// still running (nil: never): each is handed back to its peer
	// (Broker.awaitRelays).
	relaysCut context.Context
	// maxAge retires a session after about this long (±10%): it is routed
	// nothing new and ends, with Unavailable, once its stages have finished,
	// so workers spread over brokers added since (0: never).
	maxAge  time.Duration
	metrics *metrics.Metrics
	// outage hears of providerconfig reads failing for an unreachable
	// database (nil: each failure is logged).
	outage *engine.Outage
	// creds are the worker plane's tokens (nil: none): a session ends when
	// the token it opened with is revoked (revocationWatch).
	creds *auth.Plane
	// certs verify a session's client certificate again when the client
	// CA bundle changes or the certificate expires (nil: no mutual TLS).
	certs      *tlsreload.ClientCheck
	log        zerolog.Logger
	sessionSeq atomic.Int64
}

var _ workerv1connect.WorkerServiceHandler = (*workerService)(nil)

// GetProviderConfig serves a kind's default providerconfig, or refuses one
// too big for the worker's message limit (RESOURCE_EXHAUSTED, naming it).
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
		// A worker that ended its call is no failure of ours; an
		// unreachable database is the process's outage, logged once.
		if ctx.Err() == nil && !h.outage.Failed("provider-config", err) {
			h.log.Error().Err(err).Str("kind", kind).Msg("read default providerconfig")
		}
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("providerconfig unavailable; retry"))
	}
	h.outage.Succeeded()
	if !ok {
		return connect.NewResponse(&workerv1.GetProviderConfigResponse{}), nil
	}
	res := &workerv1.GetProviderConfigResponse{Found: true, Config: configProto(pc)}
	if limit := sessionMaxMsg(h.maxMessageBytes, req.Msg.GetMaxMessageBytes()); limit > 0 {
		// Sent as it is, the worker's read (or this broker's send) would
		// refuse it naming neither the config nor whose limit it broke. The
		// worker handles (and logs) the refusal; its session goes on.
		if size := proto.Size(res); size > limit {
			return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf(
				"default providerconfig %s/%s is %d bytes, over the %d-byte limit of one message to this worker (its WORKER_MAX_MESSAGE_BYTES, or the broker's when smaller)",
				pc.Kind, pc.Name, size, limit))
		}
	}
	return connect.NewResponse(res), nil
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
	if h.isClosing() {
		return errBrokerClosing
	}
	maxIn, err := h.inFlightOf(sub)
	if err != nil {
		return err
	}
	s := &session{
		id:             fmt.Sprintf("%s#%d", sub.GetWorkerId(), h.sessionSeq.Add(1)),
		workerID:       sub.GetWorkerId(),
		holder:         holderOf(principal, sub.GetWorkerId()),
		maxIn:          maxIn,
		compactRollups: sub.GetCompactRollups(),
		maxMsg:         sessionMaxMsg(h.maxMessageBytes, sub.GetMaxMessageBytes()),
		out:            make(chan *workerv1.WorkStreamResponse, maxIn+16),
		ackWake:        make(chan struct{}, 1),
		done:           make(chan struct{}),
		retiredCh:      make(chan struct{}),
		ready:          readyMap(sub.GetKinds()),
	}
	log := h.log.With().Str("worker_id", s.workerID).Logger()
	watch := h.silence > 0 && sub.GetKeepalive() && streamCutOf(ctx) != nil
	// Columns are read by applyCompose (composecols), the lists too.
	subscribed := &workerv1.Subscribed{BrokerId: h.id, Known: h.known(s, log), AcksResults: true, Batches: true,
		CompactCompositions: true, MaxMessageBytes: int64(h.maxMessageBytes)}
	if watch {
		subscribed.KeepaliveMs = keepaliveEvery(h.silence).Milliseconds()
	}
	if err := stream.Send(&workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Subscribed{
		Subscribed: subscribed}}); err != nil {
		return err
	}
	if h.adopt != nil && len(sub.GetResumed()) > 0 {
		// Before the session is registered: once it is, its kinds are
		// routable here, and the dispatcher could claim a resumed task whose
		// lease was freed with its dead broker's (at once, by the peers'
		// dead-member probe) under a new epoch — fencing out the result the
		// worker is about to redeliver, and running the task again.
		h.adopt.resumed(ctx, s, sub.GetResumed())
	}
	h.reg.add(s, h.metrics.Workers.Set)
	log.Info().Str("identity", principal.Name).Str("auth", principal.Via).Int("kinds", len(sub.GetKinds())).Int("max_in_flight", maxIn).Int("resumed", len(sub.GetResumed())).Msg("worker connected")
	defer func() {
		if h.adopt != nil {
			defer h.adopt.ended(s)
		}
		inFlight := h.reg.remove(s, h.metrics.Workers.Set)
		close(s.done)
		// One line per session, however many stages it held: each is
		// dispatched again (or awaits the worker's redelivery) without a
		// line of its own.
		log.Info().Int("stages_in_flight", inFlight).Msg("worker disconnected")
	}()
	h.serve(ctx, stream, s, sessionOpts{watch: watch, batches: sub.GetBatches()}, log)
	if h.isClosing() {
		return errBrokerClosing
	}
	return h.reg.retiredFor(s) // a planned end, or nil
}

// sessionMaxMsg is the largest message a session may be sent: the smaller
// of the broker's limit and the worker's (0 where unknown).
func sessionMaxMsg(broker int, worker int64) int {
	if worker <= 0 || (broker > 0 && int64(broker) <= worker) {
		return broker
	}
	return int(min(worker, int64(math.MaxInt32)))
}

// defaultSessionInFlight is a session's max_in_flight when its Subscribe
// leaves it unset (0).
const defaultSessionInFlight = 16

// inFlightOf is the number of stages a session may hold at once, from its
// Subscribe's max_in_flight: unset is defaultSessionInFlight; a negative one,
// or one above WORKER_MAX_IN_FLIGHT, is refused (InvalidArgument), since the
// session's send queue is sized by it.
func (h *workerService) inFlightOf(sub *workerv1.Subscribe) (int, error) {
	limit := h.maxInFlight
	if limit <= 0 {
		limit = DefaultMaxInFlight
	}
	n := int(sub.GetMaxInFlight())
	switch {
	case n == 0:
		return min(defaultSessionInFlight, limit), nil
	case n < 0:
		return 0, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("subscribe max_in_flight %d: want a positive number (or 0 for %d)", n, defaultSessionInFlight))
	case n > limit:
		return 0, connect.NewError(connect.CodeInvalidArgument,
			fmt.Errorf("subscribe max_in_flight %d is above this broker's WORKER_MAX_IN_FLIGHT (%d): lower the worker's parallelism (WORKER_MAX_PARALLEL)", n, limit))
	}
	return n, nil
}

// The planned ends of a session (workerproto.PlannedSessionEnd). The worker
// reconnects (to any broker, behind a Service) and redelivers any result
// whose ack it did not get.
var (
	errBrokerClosing = connect.NewError(connect.CodeUnavailable,
		errors.New(workerproto.PlannedSessionEnd+": the broker has drained and is shutting down; reconnect"))
	errSessionRetired = connect.NewError(connect.CodeUnavailable,
		errors.New(workerproto.PlannedSessionEnd+": the session reached WORKER_SESSION_MAX_AGE; reconnect"))
	errSessionShed = connect.NewError(connect.CodeUnavailable,
		errors.New(workerproto.PlannedSessionEnd+": the broker serves more than its share of the workers; reconnect"))
)

// isClosing reports whether the broker's drain has ended.
func (h *workerService) isClosing() bool {
	select {
	case <-h.closing:
		return true
	default:
		return false
	}
}

// endWhenDue ends s once it is retired — the broker has drained
// (closeRouting), s has reached its maximum age (retired here), or it was
// shed to spread the workers (spreader) — and s runs no stage: the
// registry routes it nothing new by then, and a stage it runs (a peer's
// relay, which outlives this broker's own drain) finishes and goes back
// first. end stops the session's reading, so serve's loop returns and its
// sender sends the acks still queued. It returns when ctx (the session)
// ends.
func (h *workerService) endWhenDue(ctx context.Context, s *session, end func(), log zerolog.Logger) {
	var aged <-chan time.Time
	if h.maxAge > 0 {
		t := time.NewTimer(jittered(h.maxAge))
		defer t.Stop()
		aged = t.C
	}
	select {
	case <-s.retiredCh: // logged where it was retired
	case <-aged:
		h.reg.retire(s, errSessionRetired)
		log.Info().Dur("max_age", h.maxAge).Msg("worker session reached WORKER_SESSION_MAX_AGE; ending it once its stages finish")
	case <-ctx.Done():
		return
	}
	for {
		idle, changed := h.reg.idleUntil(s)
		if idle {
			end()
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// jittered is d ± 10%, so sessions opened together do not all end together.
func jittered(d time.Duration) time.Duration {
	return d - d/10 + time.Duration(rand.Int64N(int64(d/5)+1))
}

// sessionOpts is what a session's Subscribe negotiated.
type sessionOpts struct {
	watch   bool // time the session out when the worker falls silent
	batches bool // the worker takes StageTasks batches
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
// (tasks batched when the worker takes batches) and batches the session's
// result acks, the receive loop routes what the worker sends, and with
// o.watch a watchdog cuts the stream once the worker has been silent for the
// silence timeout.
func (h *workerService) serve(ctx context.Context, stream *workStream, s *session, o sessionOpts, log zerolog.Logger) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var heard atomic.Int64
	heard.Store(time.Now().UnixNano())
	if o.watch {
		// The watchdog is done before the session returns, so it never
		// aborts a stream whose handler has finished.
		watched := make(chan struct{})
		go func() {
			defer close(watched)
			silenceWatch(sctx, &heard, h.silence, streamCutOf(ctx).abort, log)
		}()
		defer func() { cancel(); <-watched }()
	}
	if cut := streamCutOf(ctx); cut != nil && (h.closing != nil || h.maxAge > 0) {
		go h.endWhenDue(sctx, s, cut.endReads, log)
	}
	if cut := streamCutOf(ctx); cut != nil && h.creds != nil && principalFrom(ctx).Via == "token" {
		go h.revocationWatch(sctx, s, principalFrom(ctx), cut.abort, log)
	}
	// Any session over mutual TLS, whichever credential opened it: the
	// listener refuses every request of a certificate that no longer
	// verifies, and a session is one that lasts.
	if c, ok := ctx.Value(certKey{}).(certResult); ok && c.state != nil && h.certs != nil && streamCutOf(ctx) != nil {
		go h.certificateWatch(sctx, s, c.state, streamCutOf(ctx).abort, log)
	}
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		if err := h.send(sctx, stream, s, o.batches); err != nil {
			cancel()
		}
	}()
	pace := newStreamRate(h.streamRate)
	for {
		msg, err := stream.Receive()
		// Until this message is handled (paced, then routed: a redelivered
		// result's write, a refused result's lease release, a key re-read)
		// the broker is the one not listening, not the worker: the
		// watchdog's clock stops, and starts again when it listens again.
		heard.Store(handlingMessage)
		if err != nil || !pace.wait(sctx, max(1, len(msg.GetCompletes().GetCompletes()))) {
			cancel()
			<-sent
			return
		}
		h.handle(ctx, s, msg, log)
		heard.Store(time.Now().UnixNano())
	}
}

// handle routes one message of s's worker.
func (h *workerService) handle(ctx context.Context, s *session, msg *workerv1.WorkStreamRequest, log zerolog.Logger) {
	switch m := msg.GetMsg().(type) {
	case *workerv1.WorkStreamRequest_Readiness:
		if readinessAllowed(ctx, m.Readiness, log) {
			h.reg.setReady(s, m.Readiness.GetKinds())
		}
	case *workerv1.WorkStreamRequest_Complete:
		h.complete(s, m.Complete, log)
	case *workerv1.WorkStreamRequest_Completes:
		for _, c := range m.Completes.GetCompletes() {
			h.complete(s, c, log)
		}
	case *workerv1.WorkStreamRequest_Heartbeat:
		// Leases of tasks this broker runs are heartbeated by the
		// dispatcher; a worker's beat (empty when it is idle) only proves
		// the session alive (heard, in serve).
	case *workerv1.WorkStreamRequest_Subscribe:
		log.Warn().Msg("duplicate subscribe on an open stream; ignored")
	}
}

// send is the session's send loop: tasks (batched when the worker takes
// batches) and result acks, until ctx ends or a send fails. When ctx ends it
// sends the acks still queued, best effort: a worker whose stream still
// takes them need not redeliver those results.
func (h *workerService) send(ctx context.Context, stream *workStream, s *session, batches bool) error {
	var carry *workerv1.WorkStreamResponse
	for {
		var m *workerv1.WorkStreamResponse
		if carry != nil {
			// A deep queue keeps a carry going; acks still go out between
			// batches.
			select {
			case <-s.ackWake:
				if err := sendAcks(stream, s); err != nil {
					return err
				}
			default:
			}
			m = carry
		} else {
			select {
			case <-ctx.Done():
				_ = sendAcks(stream, s)
				return nil
			case m = <-s.out:
			case <-s.ackWake:
				if err := sendAcks(stream, s); err != nil {
					return err
				}
				continue
			}
		}
		var err error
		if carry, err = sendOut(stream, s.out, m, batchLimit(batches, s.maxMsg)); err != nil {
			return err
		}
	}
}

// sendAcks sends the session's pending result acks, if any, in messages
// that fit the session's limit (its worker's WORKER_MAX_MESSAGE_BYTES, or
// the broker's when smaller): a worker refuses a bigger one and loses its
// session, however small each ack is.
func sendAcks(stream interface {
	Send(*workerv1.WorkStreamResponse) error
}, s *session) error {
	ids := s.takeAcks()
	for len(ids) > 0 {
		n := ackChunk(ids, s.maxMsg)
		if err := stream.Send(&workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Ack{
			Ack: &workerv1.ResultAck{TaskIds: ids[:n]}}}); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// ackChunk is how many of ids, from the first, one ResultAck message of at
// most limit bytes carries (every one when limit is 0; at least one).
func ackChunk(ids []string, limit int) int {
	if limit <= 0 {
		return len(ids)
	}
	size := batchHeadroom
	for i, id := range ids {
		size += batchedBytes(len(id))
		if size > limit && i > 0 {
			return i
		}
	}
	return len(ids)
}

// complete takes one of the session's completions, once its lease secret
// checks out.
func (h *workerService) complete(s *session, c *workerv1.StageComplete, log zerolog.Logger) {
	if !h.completionAllowed(s, c, log) {
		return
	}
	id := c.GetTaskId()
	h.completions.complete(c, func() { s.ack(id) })
}

// Task batches: what one StageTasks message may carry. A batch is at most
// one HTTP/2 DATA frame that the server writes in line. net/http's HTTP/2
// server cuts a handler's writes into 4 KiB chunks, a DATA frame each, and
// writes a frame that fits its 4 KiB connection buffer in line, but a
// bigger one from a goroutine of its own. Batches of up to 8 KiB were two
// frames, the first always written by its own goroutine. A batch of at most
// taskBatchBytes is one frame: the message, Connect's 5-byte prefix and the
// frame's 9-byte header. A task too big for a batch goes out on its own.
// The bound is also under the compression floor, so batching never adds
// compression work (and never fails a send a lone task would not).
const (
	maxTaskBatch   = 128
	taskBatchBytes = 4<<10 - 9 - 5
)

// batchedBytes is what a task of size bytes adds to a StageTasks message:
// the task, its length and its field tag.
func batchedBytes(size int) int {
	return protowire.SizeTag(1) + protowire.SizeBytes(size)
}

// batchHeadroom is the WorkStreamResponse around a StageTasks (or a
// ResultAck) message: its field tag and a length of up to three bytes
// (2 MiB).
const batchHeadroom = 1 + 3

// batchLimit is the most bytes one batch of tasks to a session may take:
// taskBatchBytes, or the session's message limit when that is smaller (a
// worker's WORKER_MAX_MESSAGE_BYTES may be as low as 1 KiB, and a batch of
// tasks that each fit it need not); 0 when the worker takes no batches.
func batchLimit(batches bool, maxMsg int) int {
	switch {
	case !batches:
		return 0
	case maxMsg > 0 && maxMsg < taskBatchBytes:
		return maxMsg
	default:
		return taskBatchBytes
	}
}

// sendOut sends m and, when the worker takes batches (limit > 0: the most
// bytes a batch may take, batchLimit) and m is a task, every task already
// queued behind it (up to a batch) in the same message: it never waits for
// more, so a batch costs no latency, and under load one frame and one write
// carry many tasks. The task that ends a batch for its bytes is returned,
// to start the next one; a config push, or a task too big for any batch,
// goes out right after the batch, in order.
func sendOut(stream interface {
	Send(*workerv1.WorkStreamResponse) error
}, out <-chan *workerv1.WorkStreamResponse, m *workerv1.WorkStreamResponse, limit int) (carry *workerv1.WorkStreamResponse, err error) {
	first := m.GetTask()
	if limit <= 0 || first == nil {
		return nil, stream.Send(m)
	}
	tasks, size := []*workerv1.StageTask{first}, batchHeadroom+batchedBytes(proto.Size(first))
	var next *workerv1.WorkStreamResponse
collect:
	for len(tasks) < maxTaskBatch {
		select {
		case n := <-out:
			t := n.GetTask()
			if t == nil {
				next = n
				break collect
			}
			ts := batchedBytes(proto.Size(t)) // once: sizing was a third of the sender's CPU
			if size+ts > limit {
				if batchHeadroom+ts <= limit {
					carry = n
				} else {
					next = n
				}
				break collect
			}
			tasks, size = append(tasks, t), size+ts
		default:
			break collect
		}
	}
	if len(tasks) > 1 {
		m = &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Tasks{Tasks: &workerv1.StageTasks{Tasks: tasks}}}
	}
	if err := stream.Send(m); err != nil {
		return nil, err
	}
	if next != nil {
		return nil, stream.Send(next)
	}
	return carry, nil
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
	if h.relaysCut != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		stop := context.AfterFunc(h.relaysCut, cancel)
		defer stop()
	}
	c, err := h.stages.dispatchLocal(ctx, kv, t)
	switch {
	case h.relaysCut != nil && h.relaysCut.Err() != nil && err != nil:
		return nil, connect.NewError(connect.CodeUnavailable,
			fmt.Errorf("broker %s shut down before the relayed stage finished (SHUTDOWN_DRAIN spent); relay it again", h.id))
	case errors.Is(err, errLostMidStage):
		// Counted by the relaying broker as a lost worker (peerLostWorker).
		return nil, connect.NewError(connect.CodeAborted, err)
	case err != nil:
		return nil, connect.NewError(connect.CodeUnavailable, err)
	case c == nil:
		return nil, connect.NewError(connect.CodeUnavailable, errors.New("no worker took the stage; relay it again"))
	}
	if !req.Msg.GetCompactCompositions() {
		// A peer that predates columns would read a composition it cannot
		// see as empty: it gets lists, or, for columns that do not read, the
		// terminal failure this broker's own compose would have made of them.
		spelled, err := composecols.Spelled(c)
		if err != nil {
			spelled = proto.CloneOf(c)
			spelled.Result = &workerv1.StageComplete_Error{Error: &workerv1.TaskError{Message: err.Error(), Terminal: true}}
		}
		c = spelled
	}
	return connect.NewResponse(&workerv1.RelayStageResponse{Complete: c}), nil
}
