package broker

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store/pipeline"
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
// errWorkerLost.
func (g *stager) awaitLost(ctx context.Context, kv manifest.KindVersion, s *session, ch <-chan completion) (*completion, error) {
	wait := g.clock.After(g.redeliveryWait)
	for {
		select {
		case c := <-ch: // redelivered already (a reconnect to this broker)
			return &c, nil
		default:
		}
		if g.reg.servesOther(kv, s) || g.mesh.pick(kv) != nil {
			return nil, nil
		}
		select {
		case c := <-ch:
			return &c, nil
		case <-ctx.Done():
			return nil, errWorkerLost
		case <-wait:
			return nil, nil
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
	var backoff engine.Backoff
	giveUp := rn.clock.Now().Add(outboxRetryFor)
	for {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		err := rn.outbox.write(actx, res)
		cancel()
		if err == nil || !engine.Unreachable(err) || rn.clock.Now().After(giveUp) {
			return err
		}
		rn.outage.Failed("outbox", err)
		select {
		case <-ctx.Done():
			return err
		case <-rn.clock.After(backoff.Next()):
		}
	}
}

// releaseLease gives t's lease back, retrying with jittered backoff while the
// database is unreachable (up to outboxRetryFor). The task is still in
// flight while this runs, so its lease stays heartbeated: a release that
// fails in a restart does not leave the lease to lapse unwatched for the
// stale-lease window.
func (rn *runner) releaseLease(ctx context.Context, lease pipeline.Lease, t pipeline.Task) error {
	var backoff engine.Backoff
	giveUp := rn.clock.Now().Add(outboxRetryFor)
	for {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_, err := rn.store.Release(rctx, lease, []pipeline.TaskKey{t.Key})
		cancel()
		if err == nil || !engine.Unreachable(err) || rn.clock.Now().After(giveUp) {
			return err
		}
		rn.outage.Failed("release", err)
		<-rn.clock.After(backoff.Next())
	}
}
