package broker

import (
	"context"
	"time"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// stage dispatches one stage of t to a ready worker — one of this broker's,
// or a peer broker's over the mesh — and waits for its completion. A worker
// that disconnects mid-stage gets RedeliveryWait to reconnect and redeliver
// (its SDK buffers the result); after that the stage is dispatched again
// (at-least-once; the claim_epoch fence keeps the write single).
func (b *Broker) stage(ctx context.Context, t pipeline.Task, kind store.Kind, stage workerv1.Stage, reaction string,
	final bool, req any) (*workerv1.Outcome, error) {
	kv := kvOf(t)
	id := taskID{key: t.Key, epoch: t.ClaimEpoch, generation: t.Generation, stage: stage.String(), final: final}
	if d, ok := req.(*workerv1.StageTask_Delete); ok {
		id.finalizer = d.Delete.GetFinalizer()
	}
	tid := id.String()
	for {
		task := b.stageTask(ctx, t, kind, stage, reaction, tid, req)
		var (
			c   *workerv1.StageComplete
			err error
		)
		switch {
		case b.reg.serves(kv):
			c, err = b.dispatchLocal(ctx, kv, task)
		case b.mesh.pick(kv) != nil:
			c, err = b.relay(ctx, kv, task)
			if err != nil && ctx.Err() == nil {
				b.Log.Warn().Err(err).Str("kind", kv.String()).Msg("relay failed; retrying")
				err = b.pause(ctx)
			}
		default:
			err = b.pause(ctx)
		}
		if err != nil {
			return nil, err
		}
		if c == nil {
			continue
		}
		if e := c.GetError(); e != nil {
			return nil, &stageError{msg: e.GetMessage(), terminal: e.GetTerminal()}
		}
		return c.GetOutcome(), nil
	}
}

// pause waits for a routing change (a worker joining or freeing a slot) or a
// second, whichever comes first.
func (b *Broker) pause(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-b.reg.changed():
	case <-time.After(time.Second):
	}
	return nil
}

// dispatchLocal hands task to the least-loaded local worker serving kv and
// waits for its completion; nil, nil means the worker vanished and did not
// redeliver in time (dispatch again).
func (b *Broker) dispatchLocal(ctx context.Context, kv manifest.KindVersion, task *workerv1.StageTask) (*workerv1.StageComplete, error) {
	ch := make(chan *workerv1.StageComplete, 1)
	b.mu.Lock()
	b.waiters[task.GetTaskId()] = ch
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		delete(b.waiters, task.GetTaskId())
		b.mu.Unlock()
	}()
	s, err := b.acquireWait(ctx, kv)
	if err != nil {
		return nil, err
	}
	defer b.reg.release(s)
	if err := s.send(ctx, &workerv1.WorkStreamResponse{Msg: &workerv1.WorkStreamResponse_Task{Task: task}}); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, nil // that worker went away before the hand-over
	}
	c, err := b.await(ctx, s, ch)
	if err == nil && c == nil {
		b.Log.Warn().Str("kind", kv.String()).Str("name", task.GetResource().GetName()).Str("stage", task.GetStage().String()).
			Msg("worker lost mid-stage and did not redeliver; dispatching again")
	}
	return c, err
}

// await waits for the completion; nil, nil means the worker vanished and did
// not redeliver in time.
func (b *Broker) await(ctx context.Context, s *session, ch chan *workerv1.StageComplete) (*workerv1.StageComplete, error) {
	select {
	case c := <-ch:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.done:
	}
	select {
	case c := <-ch:
		return c, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(b.RedeliveryWait):
		return nil, nil
	}
}

// acquireWait reserves a slot on the least-loaded ready worker for kv,
// waiting for one to free up. Waiters are served oldest first (the
// registry hands a freed slot to the oldest stage it can serve), so a
// composite's rollup stage is not starved by leaf tasks claimed after it.
func (b *Broker) acquireWait(ctx context.Context, kv manifest.KindVersion) (*session, error) {
	s, w := b.reg.acquireOrWait(kv)
	if s != nil {
		return s, nil
	}
	select {
	case s := <-w.got:
		return s, nil
	case <-ctx.Done():
		b.reg.cancelWait(w)
		return nil, ctx.Err()
	}
}

func (b *Broker) stageTask(ctx context.Context, t pipeline.Task, kind store.Kind, stage workerv1.Stage, reaction, tid string, req any) *workerv1.StageTask {
	r := t.Resource
	task := &workerv1.StageTask{
		TaskId:   tid,
		Fence:    &workerv1.Fence{LeaseToken: b.ID, ClaimEpoch: t.ClaimEpoch, ManifestGen: kind.ManifestGen},
		Stage:    stage,
		Reaction: reaction,
		Resource: &workerv1.Resource{Id: r.ID.String(), Kind: r.Kind, Version: r.Version, Name: r.Name, Labels: r.Labels,
			SpecJson: r.Spec, StatusJson: r.Status, Generation: t.Generation, Finalizers: r.Finalizers},
	}
	if r.OwnerID != nil {
		task.Resource.OwnerId = r.OwnerID.String()
	}
	if len(t.ProviderConfig) > 0 || len(t.ProviderBundle) > 0 {
		task.Config = &workerv1.ProviderConfig{Kind: r.Kind, Name: "attached", SpecJson: t.ProviderConfig, DataJson: t.ProviderBundle}
	}
	if d, ok := ctx.Deadline(); ok {
		// Ship the remaining budget; floor at 1ms so a nearly spent budget
		// never reads as "no deadline" (0) on the worker.
		task.TaskDeadlineMs = max(time.Until(d).Milliseconds(), 1)
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
	return task
}
