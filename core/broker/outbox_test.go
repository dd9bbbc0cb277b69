package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/pipeline"
)

func result() pipeline.Result {
	return pipeline.Result{Key: pipeline.TaskKey{ResourceID: uuid.New(), TaskType: pipeline.TaskReconcile}, Status: json.RawMessage(`{}`)}
}

// Results that arrive while an append is in flight go out together in the
// next one, and every caller learns its own batch's outcome.
func TestOutboxWriterBatchesWhileAnAppendIsInFlight(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entered := make(chan int, 16)
	gate := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	w := newOutboxWriter(func(_ context.Context, rs ...pipeline.Result) error {
		mu.Lock()
		sizes = append(sizes, len(rs))
		mu.Unlock()
		entered <- len(rs)
		<-gate
		if len(rs) > 1 {
			return errors.New("disk full")
		}
		return nil
	})
	w.writers = 1
	go func() { _ = w.Run(ctx) }()

	first := make(chan error, 1)
	go func() { first <- w.write(ctx, result()) }()
	select {
	case <-entered: // the first append is in flight, holding the writer
	case <-ctx.Done():
		t.Fatal("first append never started")
	}
	const queued = 10
	errs := make(chan error, queued)
	for range queued {
		go func() { errs <- w.write(ctx, result()) }()
	}
	// Wait until all ten are queued behind the in-flight append.
	for len(w.reqs) < queued {
		select {
		case <-ctx.Done():
			t.Fatalf("only %d results queued", len(w.reqs))
		case <-time.After(time.Millisecond):
		}
	}
	close(gate)
	if err := <-first; err != nil {
		t.Fatalf("first write: %v", err)
	}
	for range queued {
		if err := <-errs; err == nil || err.Error() != "disk full" {
			t.Fatalf("queued write: got %v, want the batch's error", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 1 || sizes[1] != queued {
		t.Fatalf("append sizes %v, want [1 %d]", sizes, queued)
	}
}

// storeAppend checks results as the store's append does — it writes none
// of a batch that holds a result it cannot store — then calls write.
func storeAppend(write func(...pipeline.Result) error) func(context.Context, ...pipeline.Result) error {
	return func(_ context.Context, rs ...pipeline.Result) error {
		for _, r := range rs {
			if err := r.Validate(); err != nil {
				return fmt.Errorf("append outbox: %w", err)
			}
		}
		return write(rs...)
	}
}

// A result the insert would refuse is refused alone: the results batched
// beside it are written without it.
func TestOutboxWriterRefusesAnInvalidResultAlone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var written []uuid.UUID
	w := newOutboxWriter(storeAppend(func(rs ...pipeline.Result) error {
		mu.Lock()
		defer mu.Unlock()
		for _, r := range rs {
			written = append(written, r.Key.ResourceID)
		}
		return nil
	}))
	badJSON, badCond, good := result(), result(), result()
	badJSON.Status = json.RawMessage(`{"unterminated": `)
	badCond.Conditions = []pipeline.Condition{{Type: "Ready", Status: "Maybe"}}
	// Queued before the writer runs, the three go out in one batch.
	errs := make(chan error, 3)
	for _, r := range []pipeline.Result{badJSON, good, badCond} {
		require.NoError(t, w.queue(r, func(err error) { errs <- err }))
	}
	go func() { _ = w.Run(ctx) }()
	var refused, ok int
	for range 3 {
		select {
		case err := <-errs:
			if err == nil {
				ok++
				continue
			}
			require.ErrorIs(t, err, pipeline.ErrInvalidResult)
			refused++
		case <-ctx.Done():
			t.Fatal("a result's write never ended")
		}
	}
	require.Equal(t, 2, refused, "malformed status JSON and condition status Maybe")
	require.Equal(t, 1, ok)
	mu.Lock()
	require.Equal(t, []uuid.UUID{good.Key.ResourceID}, written, "the valid result alone is written")
	mu.Unlock()
	require.ErrorIs(t, w.write(ctx, badJSON), pipeline.ErrInvalidResult, "alone in its batch, as well")
	require.NoError(t, w.write(ctx, result()))
}

// A hung append fails its batch after the writer's timeout: every result in
// it learns so (and is released for a retry), and the writer goes on with
// the next batch.
func TestOutboxWriterTimesOutAHungAppend(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var hang atomic.Bool
	hang.Store(true)
	w := newOutboxWriter(func(actx context.Context, _ ...pipeline.Result) error {
		if hang.Load() {
			<-actx.Done()
			return actx.Err()
		}
		return nil
	})
	w.timeout = 50 * time.Millisecond
	go func() { _ = w.Run(ctx) }()
	err := w.write(context.Background(), result())
	require.ErrorIs(t, err, context.DeadlineExceeded, "the hung append's result fails")
	hang.Store(false)
	require.NoError(t, w.write(context.Background(), result()), "the next batch is written")
}

// A caller that gives up while its batch is being written leaves its reply
// channel behind: the writer's late reply reaches no one else, and every
// later caller learns its own batch's outcome (the reply channels are
// pooled).
func TestOutboxWriter_ALateReplyReachesNoOneElse(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	entered, gate := make(chan struct{}, 1), make(chan struct{})
	var calls atomic.Int32
	w := newOutboxWriter(func(_ context.Context, _ ...pipeline.Result) error {
		if calls.Add(1) == 1 {
			entered <- struct{}{}
			<-gate
			return errors.New("the abandoned batch's error")
		}
		return nil
	})
	w.writers = 1
	go func() { _ = w.Run(ctx) }()

	giveUp, stop := context.WithCancel(ctx)
	abandoned := make(chan error, 1)
	go func() { abandoned <- w.write(giveUp, result()) }()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the first append never started")
	}
	stop()
	require.ErrorIs(t, <-abandoned, context.Canceled)
	close(gate) // the writer now replies to the caller that left

	for i := range 200 {
		require.NoError(t, w.write(ctx, result()), "write %d got another caller's reply", i)
	}
}

// queue hands a result to the writer without waiting for its write: a
// queue that stays full for an append timeout (a database that does not
// answer) is given up on, with then never called; a queued one's then gets
// its batch's outcome.
func TestOutboxWriterQueue(t *testing.T) {
	t.Parallel()
	w := newOutboxWriter(func(context.Context, ...pipeline.Result) error { return nil })
	w.reqs, w.timeout = make(chan outboxReq, 1), 50*time.Millisecond // not running yet
	called := make(chan error, 2)
	then := func(err error) { called <- err }

	require.NoError(t, w.queue(result(), then), "queued without a writer running: nothing waits for the write")
	require.ErrorIs(t, w.queue(result(), then), errOutboxQueueFull, "a queue that stays full is given up on")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = w.Run(ctx) }()
	select {
	case err := <-called:
		require.NoError(t, err, "the queued result's then hears its write")
	case <-time.After(10 * time.Second):
		t.Fatal("the queued result was never written")
	}
	require.Empty(t, called, "then is called for the queued result alone")
}
