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
		err := w.appendTimed(ctx, results)
		var refused []error
		if errors.Is(err, pipeline.ErrInvalidResult) {
			refused, err = w.appendValid(ctx, results)
		}
		for i, r := range batch {
			rerr := err
			if refused != nil && refused[i] != nil {
				rerr = refused[i]
			}
			if r.then != nil {
				r.then(rerr)
				continue
			}
			r.done <- rerr
		}
	}
}

// appendTimed appends results, bounded by the writer's timeout.
func (w *outboxWriter) appendTimed(ctx context.Context, results []pipeline.Result) error {
	actx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	return w.append(actx, results...)
}

// appendValid is the second try of a batch the append refused, having
// checked no result before it (pipeline.ErrInvalidResult: it writes none of
// a batch that holds a result it cannot store): it appends the valid
// results, and returns each invalid one's refusal at its index (nil for
// the others) and the append's error for the rest. An invalid result comes
// only from a faulty worker, so the valid results' one check, in the
// append, is the hot path's only one.
func (w *outboxWriter) appendValid(ctx context.Context, results []pipeline.Result) ([]error, error) {
	refused := make([]error, len(results))
	valid := make([]pipeline.Result, 0, len(results))
	for i, r := range results {
		if refused[i] = r.Validate(); refused[i] == nil {
			valid = append(valid, r)
		}
	}
	if len(valid) == 0 {
		return refused, nil
	}
	return refused, w.appendTimed(ctx, valid)
}

// write appends res in the next batch and waits until that batch is
// written (or ctx ends): at most the queue ahead of it and one append
// timeout. A result the insert would refuse is refused alone (an error
// wrapping pipeline.ErrInvalidResult), and the results batched beside it
// are written without it (appendValid).
func (w *outboxWriter) write(ctx context.Context, res pipeline.Result) error {
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
// (then it returns an error and never calls then); a result the insert
// would refuse is refused alone, to then, as write's is. A redelivered
// result goes through here: the receive loop of the session that hands it
// over must not wait for the database.
func (w *outboxWriter) queue(res pipeline.Result, then func(error)) error {
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
