package broker

import (
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/engine"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/core/testsignal"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// resultQueue queues a redelivered result for the outbox without waiting
// for its write: then is called with the outcome (outboxWriter.queue).
type resultQueue interface {
	queue(res pipeline.Result, then func(error)) error
}

// completion is a worker's StageComplete and the acknowledgement to send
// once the broker has taken responsibility for it.
type completion struct {
	msg *workerv1.StageComplete
	ack func()
}

// completions routes a worker's StageComplete to the stage waiting for it
// (by task id), or — for a completion redelivered from an earlier session
// whose waiter is gone — applies it directly when it was the task's final
// stage (the drain fences it on its claim_epoch). Every completion is acked
// once its fate is settled: by the waiting stage (see stager.stage), or here
// when nobody waits, after the redelivered write committed or was refused.
type completions struct {
	// results writes the redelivered final results, batched with the
	// broker's own, off the session's receive loop.
	results resultQueue
	log     zerolog.Logger
	// outage hears of the redelivered results' writes (nil: a failed one
	// is logged, sampled).
	outage *engine.Outage
	// failures samples the warnings of failed writes that are no outage.
	failures zerolog.Logger
	// written is told the key of each redelivered final result written
	// (nil: nobody): an adopted lease is then no longer heartbeated.
	written func(pipeline.TaskKey)

	mu      sync.Mutex
	waiters map[string]*waiter
	// superseded are task ids of dispatches replaced by a new attempt
	// (redispatch.go), with when.
	superseded map[string]time.Time

	testSignals completionsSignals
}

// completionsSignals are the completions' test signals.
type completionsSignals struct {
	// redelivered: a redelivered final result's write settled (its error;
	// nil: written).
	redelivered testsignal.Signal[error]
}

// waiter is a stage waiting for its completion. Copies of it that arrive
// while the stage holds the first (a worker redelivering on a new session
// what it sent on the broken one) are acked together with the first, when
// the stage settles it: acking a copy sooner would let the worker drop the
// result before the broker has written it.
type waiter struct {
	ch        chan completion
	delivered bool // the first copy went to ch; guarded by completions.mu
	settled   bool // the stage acked; guarded by completions.mu
	// ack and more are the acks of every copy received, the first's in ack
	// (a slice for the one copy nearly every stage gets was an allocation
	// a stage); guarded by completions.mu.
	ack  func()
	more []func()
	// got is the completion the stage received from ch (stager.await).
	got completion
}

func newCompletions(results resultQueue, log zerolog.Logger) *completions {
	return &completions{results: results, log: log, waiters: map[string]*waiter{},
		failures: log.Sample(&zerolog.BurstSampler{Burst: 1, Period: time.Second})}
}

// expect registers a waiter for taskID, whose channel the completion
// arrives on; forget withdraws it.
func (c *completions) expect(taskID string) *waiter {
	w := &waiter{ch: make(chan completion, 1)}
	c.mu.Lock()
	c.waiters[taskID] = w
	c.mu.Unlock()
	return w
}

// forget withdraws w, expected for taskID, and settles a completion left
// unread (one that raced the stage giving up) as if it had arrived with
// nobody waiting. (A method, not a closure expect returns: that closure was
// an allocation a stage.)
func (c *completions) forget(taskID string, w *waiter) {
	c.mu.Lock()
	if c.waiters[taskID] == w {
		delete(c.waiters, taskID)
	}
	c.mu.Unlock()
	select {
	case left := <-w.ch:
		c.orphan(left.msg, left.ack)
	default:
	}
}

// settle acks every copy w received, and any that arrives later at once.
func (c *completions) settle(w *waiter) {
	c.mu.Lock()
	first, more := w.ack, w.more
	w.ack, w.more, w.settled = nil, nil, true
	c.mu.Unlock()
	if first != nil {
		first()
	}
	for _, ack := range more {
		ack()
	}
}

// complete delivers m to its waiter or applies a redelivered final stage;
// ack is called once the broker answers for m.
func (c *completions) complete(m *workerv1.StageComplete, ack func()) {
	c.mu.Lock()
	w, ok := c.waiters[m.GetTaskId()]
	if !ok {
		c.mu.Unlock()
		c.orphan(m, ack)
		return
	}
	if w.settled {
		c.mu.Unlock()
		ack() // a late copy of a result the stage has settled
		return
	}
	if w.ack == nil {
		w.ack = ack
	} else {
		w.more = append(w.more, ack)
	}
	first := !w.delivered
	w.delivered = true
	c.mu.Unlock()
	if first {
		w.ch <- completion{msg: m, ack: func() { c.settle(w) }} // buffered: never blocks
	}
}

// orphan settles a completion nobody waits for: a final stage's is queued
// for the outbox (fenced there on its claim_epoch) and settled when its
// write ends (wrote), without waiting for it; any other is dropped.
func (c *completions) orphan(m *workerv1.StageComplete, ack func()) {
	if c.isSuperseded(m.GetTaskId()) {
		// Debug: a reconnecting worker redelivers a burst of these (its
		// session's loss is logged once, where its stages were re-dispatched).
		c.log.Debug().Str("task_id", m.GetTaskId()).Msg("late result of a superseded dispatch; discarded")
		ack()
		return
	}
	id, err := parseTaskID(m.GetTaskId())
	if err != nil {
		c.log.Warn().Err(err).Str("task_id", m.GetTaskId()).Msg("completion for an unknown task; dropped")
		ack()
		return
	}
	if !id.final {
		c.log.Debug().Str("task_id", m.GetTaskId()).Msg("orphaned mid-pipeline completion; the task re-runs after its lease lapses")
		ack()
		return
	}
	tid := m.GetTaskId()
	if err := c.results.queue(redelivered(id, m), func(err error) { c.wrote(tid, id.key, ack, err) }); err != nil {
		c.wrote(tid, id.key, ack, err)
	}
}

// wrote settles a redelivered final result once its write has ended.
// Written, it is acked (a stale claim_epoch is fenced by the drain, so a
// duplicate never applies twice) and an adoption of its task ends; invalid,
// it is acked and dropped (the task re-runs); otherwise it is not acked, and
// the worker redelivers it on its next session. A write failing because the
// database is unreachable is the process's outage, logged once for all.
// It runs on the outbox writer's goroutine: it must not block.
func (c *completions) wrote(taskID string, key pipeline.TaskKey, ack func(), err error) {
	defer c.testSignals.redelivered.Signal(err)
	switch {
	case err == nil:
		c.outage.Succeeded()
		ack()
		if c.written != nil {
			c.written(key)
		}
		// Debug: a reconnecting worker redelivers a burst of these at once.
		c.log.Debug().Str("task_id", taskID).Msg("applied a redelivered completion (fenced on its claim_epoch)")
	case errors.Is(err, pipeline.ErrInvalidResult):
		ack()
		c.log.Warn().Err(err).Str("task_id", taskID).Msg("redelivered result is invalid; dropped, the task re-runs")
	case c.outage.Failed("redelivered-results", err):
		// Logged once for the outage; the worker redelivers the result.
	default:
		c.failures.Warn().Err(err).Str("task_id", taskID).
			Msg("write a redelivered result; not acked, the worker redelivers it on its next session")
	}
}

// redelivered is the outbox result of a final stage's completion.
func redelivered(id taskID, m *workerv1.StageComplete) pipeline.Result {
	res := pipeline.Result{Key: id.key, ClaimEpoch: id.epoch, Generation: id.generation}
	if e := m.GetError(); e != nil {
		res.Error, res.Terminal = e.GetMessage(), e.GetTerminal()
		return res
	}
	o := m.GetOutcome() // nil when the completion carried no result: an empty outcome
	res.Status = raw(o.GetStatusJson())
	if o != nil {
		res.HealthOK = o.HealthOk
	}
	res.Conditions = conditions(o.GetConditions())
	res.OperationOutput = raw(o.GetOperationOutputJson())
	res.Finalizer = id.finalizer
	return res
}
