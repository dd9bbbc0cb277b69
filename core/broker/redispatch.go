package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// errWorkerLost: the worker running a stage vanished and the task's budget
// (or the broker) ended before another worker could take the stage over. It
// is an abandon, not a failure: the task is released and re-runs; a
// worker's disappearance is never recorded as the task's error.
var errWorkerLost = fmt.Errorf("%w: the worker running the stage vanished", errAbandon)

// supersededTTL bounds how long a superseded dispatch's task id is
// remembered; its worker redelivers within its reconnect backoff, far
// sooner.
const supersededTTL = 10 * time.Minute

// attemptID is the task id of dispatch attempt n of a stage: attempt 0 is
// the plain id, later ones carry an "|a<n>" suffix, so a late result of a
// superseded attempt is told apart from the current one's.
func attemptID(base string, n int) string {
	if n == 0 {
		return base
	}
	return base + "|a" + strconv.Itoa(n)
}

// isReady reports whether session s last declared kv ready (its readiness
// outlives the session: a worker that drained declared every kind unready
// before it left).
func (r *registry) isReady(s *session, kv manifest.KindVersion) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.ready[kv]
}

// servesOther reports whether a ready worker other than gone serves kv.
func (r *registry) servesOther(kv manifest.KindVersion, gone *session) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.sessions {
		if s != gone && s.ready[kv] {
			return true
		}
	}
	return false
}

// awaitLost runs after the worker s running a stage vanished. While another
// ready worker serves kv — one of this broker's or a peer's — it returns at
// once (nil, nil: dispatch again, under a new attempt id). Only when none
// does it waits for s to reconnect and redeliver, up to redeliveryWait, and
// re-checks whenever the routing changes. When ctx ends first it returns
// errWorkerLost. Once the broker drains it stops waiting (errDraining: the
// task is given back): a reconnecting worker reaches another broker, not
// one leaving the endpoints, and redelivers there, where the claim_epoch
// fence applies the result or the re-claim's run supersedes it.
func (g *stager) awaitLost(ctx context.Context, kv manifest.KindVersion, s *session, w *waiter) (*completion, error) {
	wait := g.clock.After(g.redeliveryWait)
	for {
		select {
		case w.got = <-w.ch: // redelivered already (a reconnect to this broker)
			return &w.got, nil
		default:
		}
		if g.reg.servesOther(kv, s) || g.mesh.pick(kv) != nil {
			return nil, nil
		}
		select {
		case w.got = <-w.ch:
			return &w.got, nil
		case <-ctx.Done():
			return nil, errWorkerLost
		case <-wait:
			return nil, nil
		case <-g.draining:
			return nil, errDraining
		case <-g.reg.changed():
		}
	}
}

// supersede records that the dispatch with task id tid was replaced by a
// new attempt: a completion for it that arrives later, with nobody waiting,
// is discarded rather than written.
func (c *completions) supersede(tid string) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.superseded == nil {
		c.superseded = map[string]time.Time{}
	}
	for id, at := range c.superseded {
		if now.Sub(at) > supersededTTL {
			delete(c.superseded, id)
		}
	}
	c.superseded[tid] = now
}

// isSuperseded reports whether tid's dispatch was replaced (see supersede).
func (c *completions) isSuperseded(tid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.superseded[tid]
	return ok
}

// outboxRetryFor bounds how long a finished task's result write is retried
// while the database is unreachable: about the stale-lease window, past
// which the lease is reaped and the result would be fenced anyway.
const outboxRetryFor = time.Minute

// writeResult appends res to the outbox, retrying with jittered backoff
// while the database is unreachable (a restart, a freeze), so a task that
// finished during an outage lands when the database returns instead of
// leaving its lease to lapse; the task stays in flight meanwhile, its lease
// heartbeated. Any other error, or the budget spent, is returned.
func (rn *runner) writeResult(ctx context.Context, res pipeline.Result) error {
	// Not cancelled with the task: a result the worker finished is written
	// even as the broker drains; the writer bounds the append.
	wctx := context.WithoutCancel(ctx)
	return rn.whileUnreachable(ctx, "outbox", rn.clock.Now().Add(outboxRetryFor), func() error {
		return rn.outbox.write(wctx, res)
	})
}

// releaseLease gives t's lease back, retrying with jittered backoff while the
// database is unreachable (up to outboxRetryFor). The task is still in
// flight while this runs, so its lease stays heartbeated: a release that
// fails in a restart does not leave the lease to lapse unwatched for the
// stale-lease window. Not cancelled with ctx: each attempt has 5 s.
func (rn *runner) releaseLease(ctx context.Context, lease pipeline.Lease, t pipeline.Task) error {
	rctx := context.WithoutCancel(ctx)
	return rn.whileUnreachable(rctx, "release", rn.clock.Now().Add(outboxRetryFor), func() error {
		actx, cancel := context.WithTimeout(rctx, 5*time.Second)
		defer cancel()
		_, err := rn.store.Release(actx, lease, []pipeline.TaskKey{t.Key})
		return err
	})
}

// whileUnreachable runs attempt until it succeeds, fails with an error other
// than the database being unreachable, ctx ends, or giveUp passes (zero: no
// bound but ctx), waiting a jittered backoff between attempts and reporting
// each failure to the outage reporter as loop. It returns the last error.
func (rn *runner) whileUnreachable(ctx context.Context, loop string, giveUp time.Time, attempt func() error) error {
	var backoff engine.Backoff
	for {
		err := attempt()
		if err == nil || !engine.Unreachable(err) || (!giveUp.IsZero() && rn.clock.Now().After(giveUp)) {
			return err
		}
		rn.outage.Failed(loop, err)
		select {
		case <-ctx.Done():
			return err
		case <-rn.clock.After(backoff.Next()):
		}
	}
}

// lostAttemptWithin bounds the statement that counts a lost worker.
const lostAttemptWithin = 5 * time.Second

// lostAttempts is the store side of counting lost workers
// (pipeline.Store.RecordLostAttempt).
type lostAttempts interface {
	RecordLostAttempt(ctx context.Context, t pipeline.Task) (attempts, limit int, last bool, err error)
}

// countLost counts the lost-th worker lost mid-stage in this run of the
// reconcile t as one of its attempts, like a transient failure, so a poison
// pill that crashes every worker it reaches is bounded by the kind's
// max_transient_attempts instead of re-dispatching forever. At the bound it
// returns a transient stageError, which the runner writes as the task's
// result and the drain dead-letters (Synced reason DeadLettered, with this
// message). What counts: a worker whose stream ended mid-stage without the
// result redelivered (its process died, was killed, or lost its
// connection). What does not: a worker that declared the kind unready
// before it left (a planned drain: the SDK does so first on SIGTERM), a
// stage that never reached the worker, this broker shutting down or
// crashing (the run ends first; a reaped lease is never counted), a result
// redelivered after a reconnect, a delete or an operate task. A kind with
// max_transient_attempts 0 counts but never dead-letters. A lease that
// moved on abandons the run.
func (g *stager) countLost(ctx context.Context, t pipeline.Task, stage workerv1.Stage, lost int) error {
	select {
	case <-ctx.Done(): // this broker is shutting down (or the budget is spent): not the task's fault
		return nil
	default:
	}
	if g.attempts == nil || t.Key.TaskType != pipeline.TaskReconcile {
		return nil
	}
	// Not cut short by the run's end (the count is the loss's, whatever
	// follows), but bounded: a database that does not answer must not hold
	// the stage, whose re-dispatch waits for this.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lostAttemptWithin)
	n, limit, last, err := g.attempts.RecordLostAttempt(rctx, t)
	cancel()
	switch {
	case errors.Is(err, pipeline.ErrFenced):
		return fmt.Errorf("%w: the lease moved on while its worker was lost", errAbandon)
	case err != nil:
		// Not counted this time; the stage is dispatched again all the same.
		if !g.outage.Failed("lost-attempts", err) {
			g.log.Warn().Err(err).Str("resource_id", t.Key.ResourceID.String()).Msg("count a lost worker against max_transient_attempts")
		}
		return nil
	case last:
		return &stageError{msg: fmt.Sprintf("worker lost: the worker running the %s stage died or disconnected without a result, %d times in a row in this run",
			stageName(stage), lost)}
	}
	// Debug: a worker's loss is logged once, with its stages in flight, when
	// its session ends; a dead-lettered resource says why on its own.
	g.log.Debug().Str("resource_id", t.Key.ResourceID.String()).Int("attempts", n).Int("max_transient_attempts", limit).
		Msg("lost worker counted as a failed attempt")
	return nil
}

// stageName is a stage's lower-case name ("work" for STAGE_WORK).
func stageName(s workerv1.Stage) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "STAGE_"))
}
