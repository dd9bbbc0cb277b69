package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/metrics"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/workerproto/childcols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// stageError is a failed stage: the worker's own error, or the broker's
// (no worker, deadline, fenced).
type stageError struct {
	msg      string
	terminal bool
}

func (e *stageError) Error() string { return e.msg }

// errAbandon means the task must be given back unfinished (shutdown past the
// drain budget, or the lease moved on): release the lease, write no result.
var errAbandon = errors.New("task abandoned")

// taskStore is the store side of running a task: the reads a rollup and a
// verb need, the compose write, and the lease release of an abandoned task.
type taskStore interface {
	SubtreeSettled(ctx context.Context, root uuid.UUID) (bool, error)
	WalkComposedSubtree(ctx context.Context, root uuid.UUID, withStatus bool, visit func(store.SubtreeNode)) (bool, error)
	OperationForTask(ctx context.Context, id uuid.UUID) (resource.Operation, error)
	ApplyCompose(ctx context.Context, t pipeline.Task, c pipeline.Composition) (pipeline.ComposeResult, error)
	Release(ctx context.Context, l pipeline.Lease, keys []pipeline.TaskKey) (int, error)
}

// stageDispatcher hands one stage of a task to a worker and returns its
// outcome and the ack of a final stage's result, to call once the task's
// result is settled (stager.stage).
type stageDispatcher interface {
	stage(ctx context.Context, t pipeline.Task, kind store.Kind, stage workerv1.Stage, reaction manifest.ReactionDecl,
		final bool, req any) (*workerv1.Outcome, func(), error)
}

// heldAcks are the acks of the final-stage results a task's run answers
// for: sent once its result is in the outbox, refused, or the task released
// — never before, so a broker that dies first leaves each with its worker to
// redeliver (to whichever broker it reconnects to).
type heldAcks []func()

func (h *heldAcks) hold(ack func()) { *h = append(*h, ack) }

func (h heldAcks) send() {
	for _, ack := range h {
		ack()
	}
}

// runner runs a claimed task's reconcile pipeline — compose, work, rollup;
// a teardown; or a verb — stage by stage and writes its result through the
// outbox writer.
type runner struct {
	store   taskStore
	stages  stageDispatcher
	outbox  *outboxWriter
	kinds   kindSource
	metrics *metrics.Metrics
	clock   engine.Clock
	log     zerolog.Logger
	// composes and rollups bound the composes and the rollup kinds' other
	// reconciles in flight (nil: unbounded).
	composes, rollups *taskSlots
	outage            *engine.Outage // nil: a failed outbox write is logged
}

// runTask runs one claimed task's pipeline under its deadline, appends the
// outcome to the outbox, and calls done when the task has ended. A task that
// takes no slot runs at once, under its claim's deadline (due; nil: its
// own). A compose or a rollup takes its slot first (slotsFor), and its
// deadline starts at the slot: queueing behind this broker's others is not
// the worker's time. One that finds no slot free waits without a goroutine:
// runTask returns, and the task runs on a goroutine of its own once a slot
// is free (or gives its lease back if ctx ends first).
func (rn *runner) runTask(ctx context.Context, lease pipeline.Lease, t pipeline.Task, due *claimDeadline, done func()) {
	slots := rn.slotsFor(t)
	if slots == nil {
		rn.run(ctx, lease, t, due)
		done()
		return
	}
	rn.runSlotted(ctx, lease, t, slots, done)
}

// runSlotted is runTask for a task that takes a slot. It is a function of
// its own, never inlined, so that only these tasks' copies move to the heap
// for the closures: a leaf's task stays on its goroutine's stack (the copy
// was 3% of the bytes the broker allocated per leaf).
//
//go:noinline
func (rn *runner) runSlotted(ctx context.Context, lease pipeline.Lease, t pipeline.Task, slots *taskSlots, done func()) {
	slots.take(ctx, func(release func(), queued bool) {
		run := func() {
			defer done()
			if release == nil {
				rn.abandon(lease, t, nil)
				return
			}
			defer release()
			rn.run(ctx, lease, t, nil)
		}
		if queued {
			go run()
			return
		}
		run()
	})
}

// run is runTask for a task that holds its slot, if it needs one.
func (rn *runner) run(ctx context.Context, lease pipeline.Lease, t pipeline.Task, due *claimDeadline) {
	started := rn.clock.Now()
	tctx := ctx
	if t.Deadline > 0 {
		var cancel context.CancelFunc
		tctx, cancel = due.context(ctx, t.Deadline)
		defer cancel()
	}

	var held heldAcks
	res, err := rn.pipeline(tctx, t, &held)
	switch {
	case errors.Is(err, errAbandon) || (err != nil && ctx.Err() != nil):
		rn.abandon(lease, t, held)
		return
	case err != nil && tctx.Err() != nil:
		res = t.Failure(fmt.Sprintf("task deadline of %s exceeded", t.Deadline), false)
	case err != nil:
		var se *stageError
		if errors.As(err, &se) {
			res = t.Failure(se.msg, se.terminal)
		} else {
			res = t.Failure(err.Error(), false)
		}
	}
	err = rn.writeResult(ctx, res)
	if errors.Is(err, pipeline.ErrInvalidResult) {
		// A worker bug (malformed status JSON, a bad condition): record it
		// as the task's failure rather than dropping the result.
		res = t.Failure(fmt.Sprintf("worker returned an invalid outcome: %v", err), false)
		err = rn.writeResult(ctx, res)
	}
	if err != nil {
		if !rn.outage.Failed("outbox", err) {
			rn.log.Error().Err(err).Str("kind", t.Resource.Kind).Str("name", t.Resource.Name).
				Msg("append result to outbox; releasing the task for a retry")
		}
		if rn.releaseLease(ctx, lease, t) == nil {
			held.send() // the task re-runs; its worker need not redeliver
		}
		return
	}
	held.send()
	result := "ok"
	if res.Error != "" {
		result = "error"
	}
	rn.metrics.Completions.WithLabelValues(t.Resource.Kind, string(t.Key.TaskType), result).Inc()
	rn.metrics.TaskDuration.WithLabelValues(t.Resource.Kind, string(t.Key.TaskType)).Observe(rn.clock.Now().Sub(started).Seconds())
}

// abandon gives a task's lease back without a result (shutdown, a fenced
// compose) and acks the worker results it held once the release is written.
func (rn *runner) abandon(lease pipeline.Lease, t pipeline.Task, held heldAcks) {
	if rerr := rn.releaseLease(context.Background(), lease, t); rerr != nil {
		rn.log.Warn().Err(rerr).Str("resource_id", t.Key.ResourceID.String()).Msg("release abandoned task; the reaper will reclaim it")
		return
	}
	held.send()
}

// pipeline runs the stages a task needs and builds its outbox result.
func (rn *runner) pipeline(ctx context.Context, t pipeline.Task, held *heldAcks) (pipeline.Result, error) {
	kind, ok := rn.kinds.Kind(kvOf(t))
	if !ok {
		return pipeline.Result{}, &stageError{msg: fmt.Sprintf("kind %s has no applied manifest", kvOf(t))}
	}
	switch t.Key.TaskType {
	case pipeline.TaskDelete:
		return rn.runDelete(ctx, t, kind, held)
	case pipeline.TaskOperate:
		return rn.runOperate(ctx, t, kind, held)
	default:
		return rn.runReconcile(ctx, t, kind, held)
	}
}

// runReconcile: compose (when the spec moved past composed_gen) → work →
// rollup (once every live descendant has settled; until then the partial
// status is reported without advancing synced_gen).
func (rn *runner) runReconcile(ctx context.Context, t pipeline.Task, kind store.Kind, held *heldAcks) (pipeline.Result, error) {
	m := kind.Manifest
	res := pipeline.Result{Key: t.Key, ClaimEpoch: t.ClaimEpoch, Generation: t.Generation}
	composer, _ := m.Composer()
	worker, hasWorker := m.Worker()
	rollup, hasRollup := m.Rollup()
	resync, hasResync := m.Resync()
	settledOnly := t.IsRollup()

	if composes(t, kind) {
		out, err := rn.compose(ctx, t, kind, composer, held)
		if err != nil {
			return res, err
		}
		apply(&res, composer.Emits, out)
	}
	switch {
	case t.Trigger == string(manifest.TriggerResync) && hasResync:
		out, ack, err := rn.stages.stage(ctx, t, kind, workerv1.Stage_STAGE_WORK, resync, !hasRollup,
			&workerv1.StageTask_Work{Work: &workerv1.WorkRequest{Trigger: t.Trigger}})
		held.hold(ack)
		if err != nil {
			return res, err
		}
		apply(&res, resync.Emits, out)
	case hasWorker && !settledOnly:
		out, ack, err := rn.stages.stage(ctx, t, kind, workerv1.Stage_STAGE_WORK, worker, !hasRollup,
			&workerv1.StageTask_Work{Work: &workerv1.WorkRequest{Trigger: t.Trigger}})
		held.hold(ack)
		if err != nil {
			return res, err
		}
		apply(&res, worker.Emits, out)
	}
	if hasRollup {
		settled, err := storeStep(ctx, rn, "rollup", func(ctx context.Context) (bool, error) {
			return rn.store.SubtreeSettled(ctx, t.Key.ResourceID)
		})
		if err != nil {
			return res, err
		}
		if !settled {
			// Report what we have; the cascade re-pends the root when the
			// last descendant settles.
			res.DeferSync = true
			return res, nil
		}
		withStatus := rollup.Reading().Has(manifest.ReadChildStatus)
		cols := childcols.New(t.Key.ResourceID, 0, withStatus)
		settled, err = storeStep(ctx, rn, "rollup", func(ctx context.Context) (bool, error) {
			cols.Reset() // a retried read starts over
			return rn.store.WalkComposedSubtree(ctx, t.Key.ResourceID, withStatus, func(n store.SubtreeNode) {
				cols.Add(n.ID, n.Kind, n.Name, string(n.Phase), n.HealthOK, n.Status, n.OwnerID)
			})
		})
		if err != nil {
			return res, err
		}
		if !settled {
			// Report what we have; the cascade re-pends the root when the
			// last descendant settles.
			res.DeferSync = true
			return res, nil
		}
		compact, err := cols.Finish()
		if err != nil {
			return res, err
		}
		out, ack, err := rn.stages.stage(ctx, t, kind, workerv1.Stage_STAGE_ROLLUP, rollup, true,
			&workerv1.StageTask_Rollup{Rollup: &workerv1.RollupRequest{Compact: compact}})
		held.hold(ack)
		if err != nil {
			return res, err
		}
		apply(&res, rollup.Emits, out)
	}
	return res, nil
}

// storeStep runs one of a task's own database steps (a composition's write,
// a rollup's subtree reads, an operation's lookup), retrying with backoff
// while the database is unreachable, until the task's context ends (its
// deadline, the broker's shutdown). A Postgres restart is the control
// plane's outage, not the resource's failure: recorded as one, it would
// show the resource Failed and hold it behind the transient-failure backoff
// (1 s, 2 s, 4 s … per failure in a row) after the database is back. A step
// the database refuses (a constraint, a fence) fails at once.
func storeStep[T any](ctx context.Context, rn *runner, step string, fn func(context.Context) (T, error)) (T, error) {
	var v T
	err := rn.whileUnreachable(ctx, step, time.Time{}, func() (err error) {
		v, err = fn(ctx)
		return err
	})
	return v, err
}

// runDelete runs the kind's finalizer teardown; a kind without a
// deleteRequested reaction has nothing to tear down and its finalizer is
// stripped at once. The finalizer torn down and stripped is the one the
// resource was seeded with (KindManifest.Finalizer, as kind_config has it):
// a manifest stored before its deleter's finalizer had to agree with its
// finalizer_name must not strip another, which would leave the resource
// in Deleting for good.
func (rn *runner) runDelete(ctx context.Context, t pipeline.Task, kind store.Kind, held *heldAcks) (pipeline.Result, error) {
	fin := kind.Manifest.Finalizer()
	res := pipeline.Result{Key: t.Key, ClaimEpoch: t.ClaimEpoch, Generation: t.Generation, Finalizer: fin}
	deleter, ok := kind.Manifest.Deleter()
	if !ok {
		return res, nil
	}
	out, ack, err := rn.stages.stage(ctx, t, kind, workerv1.Stage_STAGE_DELETE, deleter, true,
		&workerv1.StageTask_Delete{Delete: &workerv1.DeleteRequest{Finalizer: fin}})
	held.hold(ack)
	if err != nil {
		return res, err
	}
	apply(&res, deleter.Emits&^manifest.Mask(manifest.OutcomeStatus), out)
	return res, nil
}

// runOperate runs an operator verb and returns its output.
func (rn *runner) runOperate(ctx context.Context, t pipeline.Task, kind store.Kind, held *heldAcks) (pipeline.Result, error) {
	res := pipeline.Result{Key: t.Key, ClaimEpoch: t.ClaimEpoch, Generation: t.Generation}
	op, err := storeStep(ctx, rn, "operation", func(ctx context.Context) (resource.Operation, error) {
		return rn.store.OperationForTask(ctx, t.Key.OpID)
	})
	if err != nil {
		return res, err
	}
	r, ok := kind.Manifest.Operation(op.Verb)
	if !ok {
		return res, &stageError{msg: fmt.Sprintf("kind %s declares no operation %q", kvOf(t), op.Verb), terminal: true}
	}
	out, ack, err := rn.stages.stage(ctx, t, kind, workerv1.Stage_STAGE_OPERATE, r, true,
		&workerv1.StageTask_Operate{Operate: &workerv1.OperateRequest{OperationId: op.ID.String(), Verb: op.Verb, InputJson: op.Input}})
	held.hold(ack)
	if err != nil {
		return res, err
	}
	if r.Emits.Has(manifest.OutcomeOperationOutput) {
		res.OperationOutput = raw(out.GetOperationOutputJson())
	}
	return res, nil
}

// apply copies the parts of out that emits declares into res. A
// completion that carried neither an outcome nor an error (nil out) reports
// nothing: the protocol's empty outcome, never a crash.
func apply(res *pipeline.Result, emits manifest.OutcomeMask, out *workerv1.Outcome) {
	if emits.Has(manifest.OutcomeStatus) {
		if s := raw(out.GetStatusJson()); s != nil {
			res.Status = s
		}
		if out != nil && out.HealthOk != nil {
			res.HealthOK = out.HealthOk
		}
	}
	if emits.Has(manifest.OutcomeConditions) {
		res.Conditions = append(res.Conditions, conditions(out.GetConditions())...)
	}
}

func conditions(cs []*workerv1.Condition) []pipeline.Condition {
	out := make([]pipeline.Condition, 0, len(cs))
	for _, c := range cs {
		out = append(out, pipeline.Condition{Type: c.GetType(), Status: c.GetStatus(), Reason: c.GetReason(), Message: c.GetMessage()})
	}
	return out
}

func raw(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}
