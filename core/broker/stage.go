package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"connectrpc.com/connect"
	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/workerproto/childcols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// stager hands stages to workers: to one of this broker's own (the least
// loaded, oldest waiting stage first) or to a mesh peer's, and waits for the
// completion. The dispatcher's runner, the reactor dispatcher and the
// handler's RelayStage all dispatch through it.
type stager struct {
	id          string
	reg         *registry
	mesh        *Mesh
	completions *completions
	leases      *leaseKeys
	clock       engine.Clock
	log         zerolog.Logger
	// redeliveryWait is how long a stage whose worker vanished waits for
	// the worker to reconnect and redeliver.
	redeliveryWait time.Duration
	// attempts records a reconcile's lost workers against its kind's
	// max_transient_attempts (nil: not counted).
	attempts lostAttempts
	// outage hears of a count that failed for an unreachable database
	// (nil: each failure is logged).
	outage *engine.Outage
	// draining is closed when the broker begins its shutdown drain (nil:
	// never). A stage that no ready worker serves by then, or from when the
	// last one leaves, is given back (errDraining) instead of waiting out
	// the drain budget for a worker that is not coming to a leaving broker:
	// another broker claims it. A stage waiting for a busy worker's slot
	// keeps waiting: the slot frees within the budget, and the worker runs
	// it without a re-claim.
	draining <-chan struct{}
}

// errDraining: the broker began draining before any worker took the stage;
// the task is released for another broker to claim.
var errDraining = fmt.Errorf("%w: the broker is draining and no worker has taken the stage", errAbandon)

// stage dispatches one stage of t to a ready worker — one of this broker's,
// or a peer broker's over the mesh — and waits for its completion. A worker
// that disconnects mid-stage is replaced at once when another ready worker
// (local or a peer's) serves the kind: the stage is dispatched again under a
// new attempt id, and a late result of the lost attempt is discarded
// (completions.supersede; across brokers the claim_epoch fence keeps the
// write single). Only when no other worker serves it does the stage wait up
// to RedeliveryWait for the lost worker to reconnect and redeliver (its SDK
// buffers the result). A worker's disappearance is never the task's
// failure: past the task's deadline the task is released (errWorkerLost).
//
// A non-final stage's result is acked to the worker once it arrives here. A
// final stage's is not: stage returns its ack (never nil, also beside the
// worker's own error) for the caller to call once the task's result is in
// the outbox, refused, or the task released, so a broker that dies before
// then leaves the result with the worker to redeliver.
func (g *stager) stage(ctx context.Context, t pipeline.Task, kind store.Kind, stage workerv1.Stage, reaction manifest.ReactionDecl,
	final bool, req any) (*workerv1.Outcome, func(), error) {
	kv := kvOf(t)
	id := taskID{key: t.Key, epoch: t.ClaimEpoch, generation: t.Generation, stage: stage.String(), final: final}
	if d, ok := req.(*workerv1.StageTask_Delete); ok {
		id.finalizer = d.Delete.GetFinalizer()
	}
	base, attempt, lost, crashed := id.String(), 0, 0, 0
	for {
		tid := attemptID(base, attempt)
		task, err := g.stageTask(ctx, t, kind, stage, reaction, tid, req)
		if err != nil {
			return nil, noAck, err
		}
		var c *completion
		uncounted := false // a loss that is not the task's: see countLost
		// changed is taken with the look at the workers: one that joins
		// after it still ends the pause.
		served, changed := g.reg.servesUntil(kv)
		switch {
		case served:
			var s *session
			c, s, err = g.handOverTo(ctx, kv, task)
			uncounted = c == nil && err == nil && (s == nil || !g.reg.isReady(s, kv))
		case g.mesh.pick(kv) != nil:
			var m *workerv1.StageComplete
			m, err = g.relay(ctx, kv, task)
			switch {
			case err == nil || ctx.Err() != nil:
			case peerLostWorker(err):
				// The peer's worker was lost mid-stage: a loss, counted
				// (c stays nil).
				err = nil
			default:
				// Refused or unreachable: the stage never reached a worker.
				quiet := g.log.Sample(relayWarnings)
				quiet.Warn().Err(err).Str("kind", kv.String()).Msg("relay failed; retrying")
				err = g.pause(ctx, changed)
				uncounted = true
			}
			if m != nil {
				c = &completion{msg: m, ack: noAck} // the peer acked its worker
			}
		default:
			// No worker serves the kind: nothing was handed over, so nothing
			// was lost that the task should be charged for.
			err = g.pause(ctx, changed)
			uncounted = true
		}
		if err != nil {
			if lost > 0 && ctx.Err() != nil {
				err = errWorkerLost
			}
			return nil, noAck, err
		}
		if c == nil { // the worker went away: a new attempt
			lost++
			g.completions.supersede(tid)
			attempt++
			if uncounted { // never handed over, or the worker drained (declared itself unready) before it left
				continue
			}
			crashed++
			if err := g.countLost(ctx, t, stage, crashed); err != nil {
				return nil, noAck, err
			}
			continue
		}
		ack := c.ack
		if !final {
			ack()
			ack = noAck
		}
		if e := c.msg.GetError(); e != nil {
			return nil, ack, &stageError{msg: e.GetMessage(), terminal: e.GetTerminal()}
		}
		return c.msg.GetOutcome(), ack, nil
	}
}

// relayWarnings spaces the relay-failure warnings to one a second per
// process: a peer that went away fails every stage relayed to it at once.
var relayWarnings = &zerolog.BurstSampler{Burst: 1, Period: time.Second}

// noAck is the ack of a result there is nothing to acknowledge for.
func noAck() {}

// pause waits for a routing change (a worker joining or freeing a slot;
// changed is the registry's channel taken before the caller looked) or a
// second, whichever comes first.
func (g *stager) pause(ctx context.Context, changed <-chan struct{}) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-g.draining:
		return errDraining
	case <-changed:
	case <-g.clock.After(time.Second):
	}
	return nil
}

// errLostMidStage: the worker a stage was handed to was lost before its
// result came, and did not redeliver it in time. A peer relaying the stage
// answers it with CodeAborted (peerLostWorker), so the relaying broker
// counts the loss as its own stage would (countLost); any other refusal of
// a relay means the stage never reached a worker, which is not counted.
var errLostMidStage = errors.New("worker lost mid-stage and did not redeliver")

// peerLostWorker reports whether a relay's error is its peer's worker lost
// mid-stage (errLostMidStage, sent as CodeAborted) rather than the stage
// never reaching one.
func peerLostWorker(err error) bool { return connect.CodeOf(err) == connect.CodeAborted }

// dispatchLocal hands task to the least-loaded local worker serving kv and
// waits for its completion, acked as it arrives. nil, errLostMidStage: the
// worker was lost mid-stage and did not redeliver in time; nil, nil: no
// worker took the stage, or the one that did had declared the kind unready
// (a planned drain) before it left. Either way, dispatch again.
func (g *stager) dispatchLocal(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error) {
	c, s, err := g.handOverTo(ctx, kv, task)
	switch {
	case err != nil:
		return nil, err
	case c == nil && s != nil && g.reg.isReady(s, kv):
		return nil, errLostMidStage
	case c == nil:
		return nil, nil
	}
	c.ack()
	return c.msg, nil
}

// handOverTo is handOver also returning the worker session the stage went
// to (nil when it went to none); nil, s, nil means s was lost mid-stage.
func (g *stager) handOverTo(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*completion, *session, error) {
	taskID := task.GetTaskId()
	w := g.completions.expect(taskID)
	defer g.completions.forget(taskID, w)
	s, err := g.acquireWait(ctx, kv)
	if err != nil {
		return nil, nil, err
	}
	defer g.reg.release(s)
	task, err = inForm(task, s)
	if err != nil {
		return nil, nil, err
	}
	task = g.leases.leased(task, s)
	env := new(taskEnvelope) // the message and its oneof wrapper, one allocation
	env.task.Task = task
	env.msg.Msg = &env.task
	if c := g.overLimit(s, &env.msg); c != nil {
		return c, s, nil
	}
	if err := s.send(ctx, &env.msg); err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		return nil, nil, nil // that worker went away before the hand-over: no attempt was lost
	}
	c, err := g.await(ctx, kv, s, w)
	if err == nil && c == nil {
		// Debug: the session's end logs once, with its count of stages.
		g.log.Debug().Str("kind", kv.String()).Str("name", task.GetResource().GetName()).Str("stage", task.GetStage().String()).
			Msg("worker lost mid-stage; dispatching the stage again")
	}
	return c, s, err
}

// overLimit is, for a task message m larger than s may be sent (its
// worker's WORKER_MAX_MESSAGE_BYTES, or the broker's when smaller), the
// task's terminal failure naming the size and the limit; nil when it fits.
// Sent as it is, the worker would refuse the message and lose its session,
// and every dispatch of the stage after would break the next one. The same
// resource makes the same task, so the failure is terminal. Sized only
// when it could matter (roughTaskBytes): sizing every task would cost the
// dispatch path, and a task is rarely near a limit of megabytes.
func (g *stager) overLimit(s *session, m *workerv1.WorkStreamResponse) *completion {
	if s.maxMsg <= 0 || roughTaskBytes(m.GetTask()) <= s.maxMsg {
		return nil
	}
	size := proto.Size(m)
	if size <= s.maxMsg {
		return nil
	}
	t := m.GetTask()
	msg := fmt.Sprintf("the %s task is %d bytes, over the %d-byte limit of one message to worker %s (its WORKER_MAX_MESSAGE_BYTES, or the broker's when smaller)",
		strings.ToLower(strings.TrimPrefix(t.GetStage().String(), "STAGE_")), size, s.maxMsg, s.workerID)
	g.log.Warn().Str("worker_id", s.workerID).Str("task_id", t.GetTaskId()).Str("resource_id", t.GetResource().GetId()).
		Int("bytes", size).Int("limit", s.maxMsg).Msg("task too large for the worker; failing it")
	return &completion{ack: noAck, msg: &workerv1.StageComplete{TaskId: t.GetTaskId(), Fence: t.GetFence(),
		ResourceId: t.GetResource().GetId(), Stage: t.GetStage(), LeaseSecret: t.GetLeaseSecret(),
		Result: &workerv1.StageComplete_Error{Error: &workerv1.TaskError{Message: msg, Terminal: true}}}}
}

// taskSlack bounds what a task carries besides its documents: ids, names,
// fence, finalizers, the request's small fields and the framing.
const taskSlack = 16 << 10

// roughTaskBytes is an upper bound of t's size as a message, from its
// documents' lengths: the exact size of a rollup (its subtree is most of
// it) is taken, the rest estimated.
func roughTaskBytes(t *workerv1.StageTask) int {
	if t.GetRollup() != nil {
		return proto.Size(t) + taskSlack
	}
	r, c := t.GetResource(), t.GetConfig()
	n := len(r.GetSpecJson()) + len(r.GetStatusJson()) + len(c.GetSpecJson()) + len(c.GetDataJson()) +
		len(t.GetOperate().GetInputJson()) + taskSlack
	for k, v := range r.GetLabels() {
		n += len(k) + len(v) + 8
	}
	return n
}

// await waits for w's completion; nil, nil means the worker vanished (see
// awaitLost): dispatch again. The completion is returned in w, which the
// stage already holds (a completion of its own was an allocation a stage).
func (g *stager) await(ctx context.Context, kv manifest.KindVersion, s *session, w *waiter) (*completion, error) {
	select {
	case w.got = <-w.ch:
		return &w.got, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
	}
	return g.awaitLost(ctx, kv, s, w)
}

// acquireWait reserves a slot on the least-loaded ready worker for kv,
// waiting for one to free up. Waiters are served oldest first (the
// registry hands a freed slot to the oldest stage it can serve), so a
// composite's rollup stage is not starved by leaf tasks claimed after it.
//
// Once the broker drains, the stage waits on only while a ready worker
// serves kv: when the last one leaves, it is given back (errDraining).
func (g *stager) acquireWait(ctx context.Context, kv manifest.KindVersion) (*session, error) {
	s, w := g.reg.acquireOrWait(kv)
	if s != nil {
		return s, nil
	}
	draining := g.draining
	var changed <-chan struct{} // while draining: the next routing change
	for {
		if draining == nil && g.draining != nil {
			var served bool
			if served, changed = g.reg.servesUntil(kv); !served {
				g.reg.cancelWait(w)
				return nil, errDraining
			}
		}
		select {
		case s := <-w.got:
			return s, nil
		case <-ctx.Done():
			g.reg.cancelWait(w)
			return nil, ctx.Err()
		case <-draining:
			draining = nil
		case <-changed:
		}
	}
}

// stageTask builds the task of one stage attempt. The resource carries the
// parts the reaction reads (its manifest's reads) and its identity. Labels
// that do not decode fail the stage for good: they cannot change without a
// write, which would be a new generation.
func (g *stager) stageTask(ctx context.Context, t pipeline.Task, kind store.Kind, stage workerv1.Stage, reaction manifest.ReactionDecl,
	tid string, req any) (*workerv1.StageTask, error) {
	r := t.Resource
	reads := reaction.Reading()
	var labels map[string]string
	if reads.Has(manifest.ReadLabels) {
		var err error
		if labels, err = r.Labels(); err != nil {
			return nil, &stageError{msg: err.Error(), terminal: true}
		}
	}
	m := new(stageTaskMessages)
	task, fence, res := &m.task, &m.fence, &m.resource
	fence.LeaseToken, fence.ClaimEpoch, fence.ManifestGen = g.id, t.ClaimEpoch, kind.ManifestGen
	res.Id, res.Kind, res.Version, res.Name, res.Generation = r.ID.String(), r.Kind, r.Version, r.Name, t.Generation
	task.TaskId, task.Fence, task.Stage, task.Reaction, task.Resource = tid, fence, stage, reaction.Name, res
	readParts(task.Resource, reads, r.Spec, r.Status, labels, r.Finalizers)
	if r.OwnerID != nil {
		task.Resource.OwnerId = r.OwnerID.String()
	}
	if len(t.ProviderConfig) > 0 || len(t.ProviderBundle) > 0 {
		task.Config = &workerv1.ProviderConfig{Kind: r.Kind, Name: "attached", SpecJson: t.ProviderConfig, DataJson: t.ProviderBundle}
	}
	if d, ok := ctx.Deadline(); ok {
		// Ship the remaining budget; floor at 1ms so a nearly spent budget
		// never reads as "no deadline" (0) on the worker.
		task.TaskDeadlineMs = max(d.Sub(g.clock.Now()).Milliseconds(), 1)
	}
	switch x := req.(type) {
	case *workerv1.StageTask_Compose:
		task.Request = x
	case *workerv1.StageTask_Work:
		task.Request = x
	case *workerv1.StageTask_Rollup:
		task.Request = x
	case *workerv1.StageTask_Delete:
		task.Request = x
	case *workerv1.StageTask_Operate:
		task.Request = x
	case *workerv1.StageTask_React:
		task.Request = x
	}
	return task, nil
}

// stageTaskMessages are a stage task and the fence and resource it points
// to, allocated together: one allocation a stage instead of three.
type stageTaskMessages struct {
	task     workerv1.StageTask
	fence    workerv1.Fence
	resource workerv1.Resource
}

// taskEnvelope is a stream message carrying one stage task, with its oneof
// wrapper, allocated together.
type taskEnvelope struct {
	msg  workerv1.WorkStreamResponse
	task workerv1.WorkStreamResponse_Task
}

// readParts sets the parts of a task's resource its reaction reads.
func readParts(res *workerv1.Resource, reads manifest.ReadMask, spec, status []byte, labels map[string]string, finalizers []string) {
	if reads.Has(manifest.ReadSpec) {
		res.SpecJson = spec
	}
	if reads.Has(manifest.ReadStatus) {
		res.StatusJson = status
	}
	if reads.Has(manifest.ReadLabels) {
		res.Labels = labels
	}
	if reads.Has(manifest.ReadFinalizers) {
		res.Finalizers = finalizers
	}
}

// inForm returns task in the form worker session s takes: a rollup's
// subtree, built as columns, spelled out as one ChildSummary per child when
// the worker did not ask for columns (Subscribe.compact_rollups), and
// always before a relay (s nil), since the peer may predate columns. The
// task is copied, not changed: a later attempt may go to another worker.
func inForm(task *workerv1.StageTask, s *session) (*workerv1.StageTask, error) {
	roll := task.GetRollup()
	if roll.GetCompact() == nil || (s != nil && s.compactRollups) {
		return task, nil
	}
	children, err := childcols.Summaries(roll.GetCompact(), task.GetResource().GetId())
	if err != nil {
		return nil, fmt.Errorf("rollup of %s: %w", task.GetResource().GetName(), err)
	}
	spelled := proto.CloneOf(task)
	spelled.Request = &workerv1.StageTask_Rollup{Rollup: &workerv1.RollupRequest{Children: children}}
	return spelled, nil
}

// dispatch sends task to a local worker serving kv, else to a peer.
func (g *stager) dispatch(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error) {
	if g.reg.serves(kv) {
		return g.dispatchLocal(ctx, kv, task)
	}
	return g.relay(ctx, kv, task)
}

// errNoRoute means neither a local worker nor a peer serves the kind now.
var errNoRoute = errors.New("no worker serves this kind on this broker or its peers")

// relay sends one stage to a peer broker and returns the completion.
func (g *stager) relay(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error) {
	p := g.mesh.pick(kv)
	if p == nil {
		return nil, errNoRoute
	}
	task, err := inForm(task, nil)
	if err != nil {
		return nil, err
	}
	res, err := p.client.RelayStage(ctx, connect.NewRequest(&workerv1.RelayStageRequest{Task: task, OriginBroker: g.id,
		CompactCompositions: true}))
	if err != nil {
		return nil, fmt.Errorf("relay %s stage to broker %s: %w", kv, p.id, err)
	}
	return res.Msg.GetComplete(), nil
}
