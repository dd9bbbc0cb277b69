package broker

import (
	"context"
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

// completions routes a worker's StageComplete to the stage waiting for it
// (by task id), or — for a completion redelivered from an earlier session
// whose waiter is gone — applies it directly when it was the task's final
// stage (the drain fences it on its claim_epoch).
type completions struct {
	outbox outboxAppender
	log    zerolog.Logger

	mu      sync.Mutex
	waiters map[string]chan *workerv1.StageComplete
}

func newCompletions(outbox outboxAppender, log zerolog.Logger) *completions {
	return &completions{outbox: outbox, log: log, waiters: map[string]chan *workerv1.StageComplete{}}
}

// expect registers a waiter for taskID; forget withdraws it.
func (c *completions) expect(taskID string) (ch <-chan *workerv1.StageComplete, forget func()) {
	w := make(chan *workerv1.StageComplete, 1)
	c.mu.Lock()
	c.waiters[taskID] = w
	c.mu.Unlock()
	return w, func() {
		c.mu.Lock()
		delete(c.waiters, taskID)
		c.mu.Unlock()
	}
}

// complete delivers m to its waiter or applies a redelivered final stage.
func (c *completions) complete(m *workerv1.StageComplete) {
	c.mu.Lock()
	ch, ok := c.waiters[m.GetTaskId()]
	c.mu.Unlock()
	if ok {
		select {
		case ch <- m:
		default: // a duplicate redelivery; the first one won
		}
		return
	}
	id, err := parseTaskID(m.GetTaskId())
	if err != nil {
		c.log.Warn().Err(err).Str("task_id", m.GetTaskId()).Msg("completion for an unknown task; dropped")
		return
	}
	if !id.final {
		c.log.Debug().Str("task_id", m.GetTaskId()).Msg("orphaned mid-pipeline completion; the task re-runs after its lease lapses")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.outbox.AppendOutbox(ctx, redelivered(id, m)); err != nil {
		c.log.Warn().Err(err).Str("task_id", m.GetTaskId()).Msg("apply redelivered completion; the task re-runs")
		return
	}
	c.log.Info().Str("task_id", m.GetTaskId()).Msg("applied a redelivered completion (fenced on its claim_epoch)")
}

// redelivered is the outbox result of a final stage's completion.
func redelivered(id taskID, m *workerv1.StageComplete) pipeline.Result {
	res := pipeline.Result{Key: id.key, ClaimEpoch: id.epoch, Generation: id.generation}
	if e := m.GetError(); e != nil {
		res.Error, res.Terminal = e.GetMessage(), e.GetTerminal()
		return res
	}
	o := m.GetOutcome()
	res.Status = raw(o.GetStatusJson())
	res.HealthOK = o.HealthOk
	res.Conditions = conditions(o.GetConditions())
	res.OperationOutput = raw(o.GetOperationOutputJson())
	res.Finalizer = id.finalizer
	return res
}
