package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/workerproto/composecols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// session runs one WorkStream: subscribe, redeliver buffered results, then
// receive tasks and send results, heartbeats and readiness changes until the
// stream breaks or ctx ends.
func (w *Worker) session(ctx, workCtx context.Context) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := w.client.WorkStream(sctx)
	defer stream.CloseResponse() //nolint:errcheck // best effort on teardown

	ready, draining := w.readiness()
	subscribed, err := w.subscribe(stream, ready)
	if err != nil {
		return err
	}
	acks := subscribed.GetAcksResults()
	// A broker that acks and takes batches gets every result pending at a
	// flush in one message.
	send := w.flushOneByOne
	if acks && subscribed.GetBatches() {
		send = w.flushBatched
	}
	w.setSubscribed(true, subscribed.GetMaxMessageBytes())
	defer w.setSubscribed(false, 0)
	w.log.Info().Str("broker_id", subscribed.GetBrokerId()).Int("kinds", len(ready)).
		Int("redelivering", w.resend()).Msg("connected to broker")
	readiness := &readinessReporter{w: w, send: stream.Send, last: readinessKey(ready), drained: draining}

	recvErr := make(chan error, 1)
	go func() { recvErr <- w.receive(workCtx, stream) }()

	// A broker that times out silent sessions (keepalive_ms) hears from
	// this worker at least that often: an empty heartbeat when idle.
	keepalive := time.Duration(subscribed.GetKeepaliveMs()) * time.Millisecond
	every := w.opts.HeartbeatEvery
	if keepalive > 0 {
		every = min(every, keepalive)
	}
	hb := time.NewTicker(every)
	defer hb.Stop()
	rd := time.NewTicker(w.opts.ReadinessEvery)
	defer rd.Stop()
	// linger fires when results held back to share a message are due.
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	sendMsg := inForm(stream.Send, subscribed)
	flush := func() error {
		wait, err := send(sendMsg, acks)
		if err != nil {
			return err
		}
		if wait > 0 {
			linger.Reset(wait)
		}
		return nil
	}
	w.signal() // flush anything buffered while disconnected
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-recvErr:
			return fmt.Errorf("receive: %w", err)
		case <-linger.C:
			if err := flush(); err != nil {
				return err
			}
		case <-w.wake:
			if err := flush(); err != nil {
				return err
			}
			// Draining flips readiness: tell the broker at once. A wake is
			// also every finished task, so only a drain is checked here; a
			// provider's own readiness waits for the ticker.
			if readiness.drainPending() {
				if err := readiness.report(); err != nil {
					return err
				}
			}
		case <-rd.C:
			if err := readiness.report(); err != nil {
				return err
			}
		case <-hb.C:
			if refs := w.runningRefs(); len(refs) > 0 || keepalive > 0 {
				for _, part := range w.heartbeats(refs) {
					if err := stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Heartbeat{
						Heartbeat: &workerv1.Heartbeat{Tasks: part}}}); err != nil {
						return fmt.Errorf("send heartbeat: %w", err)
					}
				}
			}
		}
	}
}

// readinessReporter tells the broker the worker's readiness when it
// changed since it last did.
type readinessReporter struct {
	w       *Worker
	send    func(*workerv1.WorkStreamRequest) error
	last    string
	drained bool // a report since the drain began has been sent
}

// drainPending reports whether the worker is draining and the broker has
// not yet been told: the only readiness change a wake must carry at once.
func (r *readinessReporter) drainPending() bool {
	if r.drained {
		return false
	}
	r.w.mu.Lock()
	draining := r.w.draining
	r.w.mu.Unlock()
	return draining
}

func (r *readinessReporter) report() error {
	kinds, draining := r.w.readiness()
	r.drained = r.drained || draining
	key := readinessKey(kinds)
	if key == r.last {
		return nil
	}
	r.last = key
	if err := r.send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Readiness{
		Readiness: &workerv1.ReadinessUpdate{Kinds: kinds}}}); err != nil {
		return fmt.Errorf("send readiness: %w", err)
	}
	return nil
}

// subscribe opens the session: it sends the Subscribe (the kinds and their
// readiness, the tasks still running from an earlier session or awaiting
// the ack of their result) and waits for the broker's Subscribed.
func (w *Worker) subscribe(stream interface {
	Send(*workerv1.WorkStreamRequest) error
	Receive() (*workerv1.WorkStreamResponse, error)
}, ready []*workerv1.KindReadiness) (*workerv1.Subscribed, error) {
	sub := &workerv1.Subscribe{
		WorkerId:    w.opts.WorkerID,
		Kinds:       ready,
		MaxInFlight: int32(w.opts.MaxParallel),
		Resumed:     w.resumedRefs(),
		Version:     w.opts.Version,
		Keepalive:   true,
		Batches:     true,
		// Columns are read by requestFromTask (childcols), the list too.
		CompactRollups:  true,
		MaxMessageBytes: int64(w.opts.MaxMessageBytes),
	}
	if err := stream.Send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Subscribe{Subscribe: sub}}); err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	first, err := stream.Receive()
	if err != nil {
		return nil, fmt.Errorf("await subscribed: %w", err)
	}
	if first.GetSubscribed() == nil {
		return nil, errors.New("broker did not acknowledge the subscription")
	}
	return first.GetSubscribed(), nil
}

// flushOneByOne sends every pending result not yet sent on this session,
// one message each. Against a broker that acks results (acks), a sent
// result stays pending until its ResultAck arrives: a send can succeed into
// a connection that is already dead, so only the ack proves the broker took
// the result. Against one that does not, a result is done once sent.
// Whatever is still pending when the session breaks is sent again on the
// next one (redelivery, fenced by its claim_epoch, so it never applies
// twice).
func (w *Worker) flushOneByOne(send func(*workerv1.WorkStreamRequest) error, acks bool) (time.Duration, error) {
	for {
		w.mu.Lock()
		if w.sent >= len(w.pending) {
			w.mu.Unlock()
			return 0, nil
		}
		c := w.fitLocked(w.sent, proto.Size(w.pending[w.sent]))
		w.sent++
		w.mu.Unlock()
		if err := send(&workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Complete{Complete: c}}); err != nil {
			w.mu.Lock()
			if w.sent > 0 && w.pending[w.sent-1] == c {
				w.sent-- // not sent: no ack may settle it
			}
			w.mu.Unlock()
			return 0, fmt.Errorf("send result of %s: %w", c.GetTaskId(), err)
		}
		if !acks {
			w.mu.Lock()
			w.removeLocked(func(p *workerv1.StageComplete) bool { return p == c })
			w.mu.Unlock()
		}
	}
}

// Result batches: what one StageCompletes message may carry, far below the
// stream's message limit; a result that would take a batch past the bytes
// starts the next message.
const (
	maxResultBatch   = 256
	resultBatchBytes = 1 << 20
)

// flushBatched is flushOneByOne for a broker that acks and takes batches:
// the pending results not yet sent go out in as few messages as the batch
// bounds allow (the broker handles each as if it came alone). A sent result
// stays pending until acked, as above.
//
// While results sent earlier still await their ack, new ones are held back
// (Nagle's rule, on acks): they go when the last ack is in, when a full
// batch has gathered, or when the oldest has waited Options.ResultLinger,
// whichever comes first. The returned duration is what is left of that
// linger (zero once everything is sent): the session flushes again then.
//
// A flush sends only the results pending when it began. One delivered while
// a send is under way woke the session, and the next flush holds it by the
// rule above: the ack for what just went out is still to come.
func (w *Worker) flushBatched(send func(*workerv1.WorkStreamRequest) error, _ bool) (time.Duration, error) {
	w.mu.Lock()
	left := len(w.pending) - w.sent
	if left > 0 && w.sent > 0 && left < maxResultBatch {
		if wait := w.opts.ResultLinger - time.Since(w.unsentSince); wait > 0 {
			w.mu.Unlock()
			return wait, nil
		}
	}
	w.mu.Unlock()
	for {
		w.mu.Lock()
		var batch []*workerv1.StageComplete
		size := 0
		// A batch stays within the message limit too (it can be below a
		// batch's bytes): each result costs its field's tag and length
		// besides its bytes.
		limit, _ := w.messageLimitLocked()
		bound := min(resultBatchBytes, limit-messageOverhead)
		for w.sent < len(w.pending) && len(batch) < min(left, maxResultBatch) {
			n := proto.Size(w.pending[w.sent])
			c := w.fitLocked(w.sent, n)
			if c != w.pending[w.sent] {
				n = proto.Size(c)
			}
			if len(batch) > 0 && size+n+messageOverhead > bound {
				break
			}
			batch, size = append(batch, c), size+n+messageOverhead
			w.sent++
		}
		left -= len(batch)
		w.mu.Unlock()
		var m *workerv1.WorkStreamRequest
		switch len(batch) {
		case 0:
			return 0, nil
		case 1:
			m = &workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Complete{Complete: batch[0]}}
		default:
			m = &workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Completes{Completes: &workerv1.StageCompletes{Completes: batch}}}
		}
		if err := send(m); err != nil {
			// The session is over: the next one resends everything pending
			// (resend), these included.
			return 0, fmt.Errorf("send %d results (first %s): %w", len(batch), batch[0].GetTaskId(), err)
		}
	}
}

// messageOverhead is what a StageComplete gains as a stream message: the
// WorkStreamRequest field's tag and length.
const messageOverhead = 16

// messageLimitLocked is the largest message this session may send: the
// smaller of Options.MaxMessageBytes and the broker's limit (named in its
// Subscribed), and whose it is. w.mu is held.
func (w *Worker) messageLimitLocked() (int, string) {
	if w.brokerMax > 0 && w.brokerMax < w.opts.MaxMessageBytes {
		return w.brokerMax, "the broker's WORKER_MAX_MESSAGE_BYTES"
	}
	return w.opts.MaxMessageBytes, "WORKER_MAX_MESSAGE_BYTES"
}

// fitLocked returns pending[i], of size bytes, or — when it cannot travel in
// one message (messageLimitLocked: this worker's limit, or the broker's when
// smaller) — its task's terminal failure naming the size and the limit,
// which replaces it in pending. Sent as it is, the result would fail its
// send (or the broker would refuse it), end the session, and be sent again
// on every session after: the results behind it never delivered. The same
// input makes the same outcome, so the failure is terminal. w.mu is held.
func (w *Worker) fitLocked(i, size int) *workerv1.StageComplete {
	c := w.pending[i]
	limit, whose := w.messageLimitLocked()
	if size+messageOverhead <= limit {
		return c
	}
	msg := fmt.Sprintf("the %s result is %d bytes, over the %d-byte limit of one message to the broker (%s)",
		stageName(c.GetStage()), size, limit, whose)
	w.log.Error().Str("task_id", c.GetTaskId()).Str("resource_id", c.GetResourceId()).Int("bytes", size).
		Int("limit", limit).Str("limit_of", whose).Msg("result too large to send; failing its task")
	f := &workerv1.StageComplete{TaskId: c.GetTaskId(), Fence: c.GetFence(), ResourceId: c.GetResourceId(), Stage: c.GetStage(),
		LeaseSecret: c.GetLeaseSecret(), Result: &workerv1.StageComplete_Error{Error: &workerv1.TaskError{Message: msg, Terminal: true}}}
	w.pending[i] = f
	return f
}

// stageName is a stage as the provider API spells it.
func stageName(s workerv1.Stage) string {
	if n, ok := stageFromProto[s]; ok {
		return string(n)
	}
	return s.String()
}

// resend marks every pending result unsent, for a new session to redeliver,
// and reports how many there are.
func (w *Worker) resend() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sent = 0
	return len(w.pending)
}

// acked drops the results the broker acknowledged: each id settles one sent
// result with that task id, the oldest (a task re-dispatched under the same
// id may have two, and each is acked on its own). One pass over the sent
// results, however many ids an ack carries.
func (w *Worker) acked(ids []string) {
	settle := make(map[string]int, len(ids))
	for _, id := range ids {
		settle[id]++
	}
	w.mu.Lock()
	kept := w.pending[:0]
	sent := w.sent
	for i, p := range w.pending {
		if i < w.sent && settle[p.GetTaskId()] > 0 {
			settle[p.GetTaskId()]--
			sent--
			continue
		}
		kept = append(kept, p)
	}
	clear(w.pending[len(kept):])
	w.pending, w.sent = kept, sent
	held := sent == 0 && len(kept) > 0
	w.mu.Unlock()
	if held {
		w.signal() // results held back for this ack go now
	}
}

// removeLocked drops the first sent result matching; w.mu is held.
func (w *Worker) removeLocked(match func(*workerv1.StageComplete) bool) {
	for i := 0; i < w.sent; i++ {
		if match(w.pending[i]) {
			w.pending = append(w.pending[:i], w.pending[i+1:]...)
			w.sent--
			return
		}
	}
}

// runningTask is a task the worker runs: its ref, which heartbeats list,
// and the lease secret it was handed with, which only a Subscribe's resumed
// ref carries.
type runningTask struct {
	ref    *workerv1.TaskRef
	secret string
}

// resumedRefs lists what a new session's Subscribe reports as resumed: the
// tasks still running and the finished ones whose results await an ack
// (they go out again on this session), each with the lease secret it was
// handed with. The broker adopts their leases — only those whose secret it
// verifies — before it makes this worker routable, so a lease the dead
// broker's removal freed is not claimed afresh — a new claim epoch would
// fence out the result about to be redelivered, and the task would run
// again.
func (w *Worker) resumedRefs() []*workerv1.TaskRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*workerv1.TaskRef, 0, len(w.running)+len(w.pending))
	for _, r := range w.running {
		out = append(out, &workerv1.TaskRef{TaskId: r.ref.GetTaskId(), Fence: r.ref.GetFence(), ResourceId: r.ref.GetResourceId(),
			LeaseSecret: r.secret})
	}
	listed := map[string]bool{} // a task re-dispatched under one id may have two results pending
	for _, p := range w.pending {
		id := p.GetTaskId()
		if _, running := w.running[id]; running || listed[id] {
			continue
		}
		listed[id] = true
		out = append(out, &workerv1.TaskRef{TaskId: id, Fence: p.GetFence(), ResourceId: p.GetResourceId(), LeaseSecret: p.GetLeaseSecret()})
	}
	return out
}

// runningRefs lists the running tasks (for heartbeats: without secrets).
// heartbeats cuts the running tasks' refs into heartbeats that each fit
// one message (messageLimitLocked): a worker with a small
// WORKER_MAX_MESSAGE_BYTES and many tasks in flight would otherwise send a
// heartbeat its own stream refuses, and lose its session at every beat.
// No refs is one empty heartbeat (the keepalive).
func (w *Worker) heartbeats(refs []*workerv1.TaskRef) [][]*workerv1.TaskRef {
	w.mu.Lock()
	limit, _ := w.messageLimitLocked()
	w.mu.Unlock()
	out := [][]*workerv1.TaskRef{nil}
	size := messageOverhead
	for _, r := range refs {
		n := proto.Size(r) + 4 // the repeated field's tag and length
		if cur := out[len(out)-1]; len(cur) > 0 && size+n > limit {
			out = append(out, nil)
			size = messageOverhead
		}
		out[len(out)-1] = append(out[len(out)-1], r)
		size += n
	}
	return out
}

func (w *Worker) runningRefs() []*workerv1.TaskRef {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]*workerv1.TaskRef, 0, len(w.running))
	for _, r := range w.running {
		out = append(out, r.ref)
	}
	return out
}

// start runs one task on the pool, at most MaxParallel at once.
func (w *Worker) start(workCtx context.Context, t *workerv1.StageTask) {
	ref := &workerv1.TaskRef{TaskId: t.GetTaskId(), Fence: t.GetFence(), ResourceId: t.GetResource().GetId()}
	w.mu.Lock()
	if w.draining {
		w.mu.Unlock()
		w.deliver(completion(t, nil, errors.New("worker is draining for shutdown")))
		return
	}
	if _, dup := w.running[t.GetTaskId()]; dup {
		w.mu.Unlock()
		return // already running (a redelivered dispatch)
	}
	if len(w.running) == 0 {
		w.idle = make(chan struct{})
	}
	w.running[t.GetTaskId()] = runningTask{ref: ref, secret: t.GetLeaseSecret()}
	w.mu.Unlock()

	r := &taskRun{w: w, t: t, returned: make(chan struct{})}
	if ms := t.GetTaskDeadlineMs(); ms > 0 {
		// From its arrival, as the broker's timer runs: not from when a
		// slot frees.
		r.deadline = time.Now().Add(time.Duration(ms) * time.Millisecond)
	}
	// The slot is waited for on the task's goroutine, not here: the
	// receive loop goes on taking acks and config pushes while every slot
	// is busy (the broker does not count the tasks a reconnecting worker
	// resumed against its max_in_flight).
	w.pool.Go(func() {
		w.sem <- struct{}{}
		w.execute(workCtx, r)
	})
}

// handlerGrace is how long a handler whose context ended (its task's
// deadline, or the drain budget spent) may take to return before the
// worker abandons it: the task is answered with the failure and its slot
// freed, while the handler's goroutine runs on, its result discarded. The
// broker's own timer has released the task and this worker's slot by then;
// a hung handler holding its slot for good would leave the worker, with
// MaxParallel of them, connected and ready and running nothing.
const handlerGrace = 2 * time.Second

// taskRun is one task being run: it is settled once, by its handler's
// return or by its abandonment, whichever comes first.
type taskRun struct {
	w *Worker
	t *workerv1.StageTask
	// deadline is the task's, counted from its arrival (zero: none).
	deadline time.Time
	settled  atomic.Bool
	returned chan struct{} // closed when the handler returned
}

// settle delivers c (nil: hands the task back, unanswered) and releases
// the task's slot, unless the task was settled already; it reports whether
// it settled it.
func (r *taskRun) settle(c *workerv1.StageComplete) bool {
	if !r.settled.CompareAndSwap(false, true) {
		return false
	}
	w := r.w
	if c != nil {
		w.deliver(c)
	} else {
		w.handedBack.Add(1)
	}
	<-w.sem
	w.mu.Lock()
	delete(w.running, r.t.GetTaskId())
	if len(w.running) == 0 {
		close(w.idle)
	}
	w.mu.Unlock()
	return true
}

// abandon settles a task whose context ended and whose handler has not
// returned within handlerGrace.
func (r *taskRun) abandon(ctx context.Context) {
	timer := time.NewTimer(handlerGrace)
	defer timer.Stop()
	select {
	case <-r.returned:
		return
	case <-timer.C:
	}
	t := r.t
	var c *workerv1.StageComplete // the drain cancelled it: handed back
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		c = completion(t, nil, fmt.Errorf("task deadline of %dms exceeded and the handler did not return within %s of its cancellation: abandoned",
			t.GetTaskDeadlineMs(), handlerGrace))
	}
	if r.settle(c) {
		res := t.GetResource()
		r.w.log.Error().Str("kind", res.GetKind()).Str("name", res.GetName()).Str("reaction", t.GetReaction()).
			Str("task_id", t.GetTaskId()).Msg("handler ignores its context; abandoned it (its goroutine runs on)")
	}
}

// execute runs one task, delivers its result and releases its slot. A
// task whose handler failed once the drain budget was spent (workCtx
// cancelled) is handed back instead, unanswered: the broker, told the
// worker went unready when the drain began, dispatches it again when the
// session ends, at once and without counting an attempt, where a failure
// would count toward max_transient_attempts and wait out a retry backoff.
func (w *Worker) execute(workCtx context.Context, r *taskRun) {
	if workCtx.Err() != nil { // the drain budget was spent while it waited for a slot
		r.settle(nil)
		return
	}
	out, err := w.run(workCtx, r)
	if err != nil && workCtx.Err() != nil {
		r.settle(nil)
		return
	}
	r.settle(completion(r.t, &out, err))
}

// run executes the provider's handler under the task deadline, isolating a
// panic to this task; a handler that outlives its context by handlerGrace
// is abandoned (taskRun.abandon).
func (w *Worker) run(workCtx context.Context, tr *taskRun) (out Outcome, err error) {
	defer close(tr.returned)
	t := tr.t
	r := t.GetResource()
	p, ok := w.providers[r.GetKind()+"/"+r.GetVersion()]
	if !ok {
		return out, Terminal(fmt.Errorf("worker %s serves no provider for %s/%s", w.opts.WorkerID, r.GetKind(), r.GetVersion()))
	}
	ctx := withClaim(workCtx, Claim{Epoch: t.GetFence().GetClaimEpoch(), Broker: t.GetFence().GetLeaseToken(), TaskID: t.GetTaskId()})
	if !tr.deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, tr.deadline)
		defer cancel()
		if ctx.Err() != nil {
			// Spent waiting for a slot: the broker has released the task.
			return out, fmt.Errorf("task deadline of %dms exceeded before a slot was free: not run", t.GetTaskDeadlineMs())
		}
	}
	var def *ProviderConfig
	if c, ok := w.defaults.get(r.GetKind()); ok {
		def = &c
	}
	req, err := requestFromTask(t, def)
	if err != nil {
		return out, Terminal(err)
	}
	defer func() {
		if rec := recover(); rec != nil {
			w.log.Error().Str("kind", r.GetKind()).Str("name", r.GetName()).Str("reaction", t.GetReaction()).
				Interface("panic", rec).Bytes("stack", debug.Stack()).Msg("handler panicked")
			err = fmt.Errorf("handler %s/%s panicked: %v", r.GetKind(), t.GetReaction(), rec)
		}
	}()
	// The task line is built only when it is logged: a clock read and the
	// stage's name per task are measurable at thousands of tasks a second.
	traced := w.log.GetLevel() <= zerolog.DebugLevel && zerolog.GlobalLevel() <= zerolog.DebugLevel
	var started time.Time
	if traced {
		started = time.Now()
	}
	stop := context.AfterFunc(ctx, func() { tr.abandon(ctx) })
	defer stop()
	out, err = p.Work(ctx, req)
	if err == nil && ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("task deadline of %dms exceeded", t.GetTaskDeadlineMs())
	}
	if traced {
		w.log.Debug().Str("kind", r.GetKind()).Str("name", r.GetName()).Str("stage", t.GetStage().String()).
			Dur("took", time.Since(started)).AnErr("err", err).Msg("task done")
	}
	return out, err
}

func completion(t *workerv1.StageTask, out *Outcome, err error) *workerv1.StageComplete {
	c := &workerv1.StageComplete{TaskId: t.GetTaskId(), Fence: t.GetFence(), ResourceId: t.GetResource().GetId(), Stage: t.GetStage(),
		LeaseSecret: t.GetLeaseSecret()}
	if err != nil {
		c.Result = &workerv1.StageComplete_Error{Error: &workerv1.TaskError{Message: err.Error(), Terminal: IsTerminal(err)}}
		return c
	}
	if out == nil {
		out = &Outcome{}
	}
	c.Result = &workerv1.StageComplete_Outcome{Outcome: outcomeToProto(*out)}
	return c
}

// deliver queues a result for the current (or next) session; it stays
// pending until the broker acks it (see flush).
func (w *Worker) deliver(c *workerv1.StageComplete) {
	w.mu.Lock()
	if len(w.pending) >= w.opts.BufferSize {
		w.pending = w.pending[1:]
		if w.sent > 0 {
			w.sent--
		}
		w.dropped++
		w.log.Warn().Int64("dropped", w.dropped).Msg("redelivery buffer full; discarded the oldest result (its task will re-run)")
	}
	if w.sent == len(w.pending) {
		w.unsentSince = time.Now()
	}
	w.pending = append(w.pending, c)
	w.mu.Unlock()
	w.signal()
}

// receive handles the broker's messages (tasks, config pushes, result acks)
// until the stream breaks.
func (w *Worker) receive(workCtx context.Context, stream interface {
	Receive() (*workerv1.WorkStreamResponse, error)
}) error {
	for {
		msg, err := stream.Receive()
		if err != nil {
			return err
		}
		switch m := msg.GetMsg().(type) {
		case *workerv1.WorkStreamResponse_Task:
			w.start(workCtx, m.Task)
		case *workerv1.WorkStreamResponse_Tasks:
			for _, t := range m.Tasks.GetTasks() {
				w.start(workCtx, t)
			}
		case *workerv1.WorkStreamResponse_Config:
			w.applyConfig(m.Config.GetKind(), m.Config.GetConfig(), m.Config.GetDeleted())
		case *workerv1.WorkStreamResponse_Ack:
			w.acked(m.Ack.GetTaskIds())
		}
	}
}

// inForm is a session's send, spelling compositions out for a broker that
// does not take them in columns.
func inForm(send func(*workerv1.WorkStreamRequest) error, subscribed *workerv1.Subscribed) func(*workerv1.WorkStreamRequest) error {
	if subscribed.GetCompactCompositions() {
		return send
	}
	return spellCompositions(send)
}

// spellCompositions wraps a session's send for a broker that does not take
// a composition in columns (Subscribed.compact_compositions false): a
// result that carries columns goes as a copy with them spelled out as
// children and edges. The pending result keeps its columns, for a later
// session's broker that takes them.
func spellCompositions(send func(*workerv1.WorkStreamRequest) error) func(*workerv1.WorkStreamRequest) error {
	return func(m *workerv1.WorkStreamRequest) error {
		switch x := m.GetMsg().(type) {
		case *workerv1.WorkStreamRequest_Complete:
			c, err := composecols.Spelled(x.Complete)
			if err != nil {
				return err
			}
			if c != x.Complete {
				m = &workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Complete{Complete: c}}
			}
		case *workerv1.WorkStreamRequest_Completes:
			var batch []*workerv1.StageComplete
			for i, c := range x.Completes.GetCompletes() {
				s, err := composecols.Spelled(c)
				if err != nil {
					return err
				}
				if s != c && batch == nil {
					batch = slices.Clone(x.Completes.GetCompletes())
				}
				if batch != nil {
					batch[i] = s
				}
			}
			if batch != nil {
				m = &workerv1.WorkStreamRequest{Msg: &workerv1.WorkStreamRequest_Completes{
					Completes: &workerv1.StageCompletes{Completes: batch}}}
			}
		}
		return send(m)
	}
}
