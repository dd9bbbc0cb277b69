package broker

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/core/store/pipeline"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// outboxAppender writes results to the transactional outbox.
type outboxAppender interface {
	AppendOutbox(ctx context.Context, results ...pipeline.Result) error
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
	outbox outboxAppender
	log    zerolog.Logger
	// written is told the key of each redelivered final result written
	// (nil: nobody): an adopted lease is then no longer heartbeated.
	written func(pipeline.TaskKey)

	mu      sync.Mutex
	waiters map[string]*waiter
	// superseded are task ids of dispatches replaced by a new attempt
	// (redispatch.go), with when.
	superseded map[string]time.Time
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

func newCompletions(outbox outboxAppender, log zerolog.Logger) *completions {
	return &completions{outbox: outbox, log: log, waiters: map[string]*waiter{}}
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

// orphan settles a completion nobody waits for: a final stage's is written
// to the outbox (fenced there on its claim_epoch), any other is dropped.
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
	res := redelivered(id, m)
	if err := res.Validate(); err != nil {
		c.log.Warn().Err(err).Str("task_id", m.GetTaskId()).Msg("redelivered completion is invalid; dropped, the task re-runs")
		ack()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.outbox.AppendOutbox(ctx, res); err != nil {
		if errors.Is(err, pipeline.ErrInvalidResult) {
			ack()
		}
		// Not acked: the worker redelivers it on its next session.
		c.log.Warn().Err(err).Str("task_id", m.GetTaskId()).Msg("apply redelivered completion; the task re-runs")
		return
	}
	// Written; a stale claim_epoch (the task was re-claimed meanwhile) is
	// fenced by the drain, so a duplicate never applies twice.
	ack()
	if c.written != nil {
		c.written(id.key)
	}
	// Debug: a reconnecting worker redelivers a burst of these at once.
	c.log.Debug().Str("task_id", m.GetTaskId()).Msg("applied a redelivered completion (fenced on its claim_epoch)")
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
