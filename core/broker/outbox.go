package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/converge-run/converge/core/store/pipeline"
)

// outboxWriter batches finished tasks' results into multi-row outbox
// appends. Results queue while an append is in flight and go out together in
// the next one (no timer, no linger: an idle broker's lone result is written
// at once), so a burst of completions costs one statement and one commit,
// not one per task. Each caller still learns whether its own result was
// written, so a failed append releases exactly the tasks it carried.
type outboxWriter struct {
	append  func(context.Context, ...pipeline.Result) error
	reqs    chan outboxReq
	max     int
	writers int
	timeout time.Duration // bounds each append (a hung database fails the batch)
	// replies pools the callers' reply channels: one a result was an
	// allocation per leaf. A channel goes back only when it is empty and
	// nobody will send on it again. The pool is the writer's own, so its
	// channels never cross into another writer's goroutines (a test's
	// synctest bubble among them).
	replies sync.Pool
}

type outboxReq struct {
	res  pipeline.Result
	done chan error // buffered (1): the writer's one send never blocks
	// then, when set instead of done, is called with the batch's outcome
	// on the writer's goroutine (queue).
	then func(error)
}

// Defaults of the outbox writer.
const (
	outboxBatchMax = 500 // results per append statement
	outboxWriters  = 2   // appends in flight at once
	// outboxAppendTimeout bounds one append statement: one timer per batch,
	// where a timer per result was a percent of the broker's CPU.
	outboxAppendTimeout = 10 * time.Second
)

func newOutboxWriter(appendFn func(context.Context, ...pipeline.Result) error) *outboxWriter {
	return &outboxWriter{append: appendFn, reqs: make(chan outboxReq, outboxBatchMax), max: outboxBatchMax,
		writers: outboxWriters, timeout: outboxAppendTimeout,
		replies: sync.Pool{New: func() any { return make(chan error, 1) }}}
}

// Name implements engine.Duty.
func (w *outboxWriter) Name() string { return "outbox-writer" }

// Run writes batches until ctx ends. ctx must outlive every task that may
// still append (the broker cancels it only after the shutdown drain).
func (w *outboxWriter) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for range w.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx)
		}()
	}
	wg.Wait()
	return nil
}

func (w *outboxWriter) loop(ctx context.Context) {
	batch := make([]outboxReq, 0, w.max)
	results := make([]pipeline.Result, 0, w.max)
	for {
		batch, results = batch[:0], results[:0]
		select {
		case <-ctx.Done():
			return
		case r := <-w.reqs:
			batch = append(batch, r)
		}
	fill:
		for len(batch) < w.max {
			select {
			case r := <-w.reqs:
				batch = append(batch, r)
			default:
				break fill
			}
		}
		for _, r := range batch {
			results = append(results, r.res)
		}
		actx, cancel := context.WithTimeout(ctx, w.timeout)
		err := w.append(actx, results...)
		cancel()
		for _, r := range batch {
			if r.then != nil {
				r.then(err)
				continue
			}
			r.done <- err
		}
	}
}

// write appends res in the next batch and waits until that batch is
// written (or ctx ends): at most the queue ahead of it and one append
// timeout. A result the insert would refuse is refused here, alone (an
// error wrapping pipeline.ErrInvalidResult), so it can never fail the
// results batched beside it.
func (w *outboxWriter) write(ctx context.Context, res pipeline.Result) error {
	if err := res.Validate(); err != nil {
		return err
	}
	done := w.replies.Get().(chan error)
	req := outboxReq{res: res, done: done}
	select {
	case w.reqs <- req:
	case <-ctx.Done():
		w.replies.Put(done) // never queued: nothing will send on it
		return fmt.Errorf("queue result for the outbox: %w", ctx.Err())
	}
	select {
	case err := <-done:
		w.replies.Put(done) // its one send received: empty again
		return err
	case <-ctx.Done():
		// The batch may still be written; the claim_epoch fence keeps a
		// re-run's result and this one from both applying. Its writer
		// will still send on done, so done is left to the collector.
		return fmt.Errorf("wait for the outbox append: %w", ctx.Err())
	}
}

// errOutboxQueueFull: the writer's queue stayed full for an append timeout.
var errOutboxQueueFull = errors.New("the outbox writer's queue stayed full")

// queue appends res in a coming batch without waiting for it to be written:
// then is called with the outcome, on the writer's goroutine, so it must
// not block. It waits for room in the queue at most an append timeout
// (then it returns an error and never calls then), and, like write, refuses
// a result the insert would refuse at once, alone. A redelivered result
// goes through here: the receive loop of the session that hands it over
// must not wait for the database.
func (w *outboxWriter) queue(res pipeline.Result, then func(error)) error {
	if err := res.Validate(); err != nil {
		return err
	}
	req := outboxReq{res: res, then: then}
	select {
	case w.reqs <- req:
		return nil
	default:
	}
	t := time.NewTimer(w.timeout)
	defer t.Stop()
	select {
	case w.reqs <- req:
		return nil
	case <-t.C:
		return fmt.Errorf("queue a result for the outbox (%d queued): %w", cap(w.reqs), errOutboxQueueFull)
	}
}
