package live

import (
	"context"
	"strings"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/notify"
)

type opKey = uuid.UUID

type opSub struct {
	id   uuid.UUID
	last resource.Operation
	// owed is the latest state, which did not fit the buffer (nil: none
	// owed); the hub retries it until it fits (see owedPush), and the
	// subscription ends only once a final state was pushed.
	owed   *resource.Operation
	send   func(resource.Operation) bool
	close  func()
	closed bool
	// drop removes and closes the subscription (h.mu held).
	drop func()
}

// retry sends the owed state, and ends the subscription after a final one.
func (s *opSub) retry() bool {
	if s.closed || s.owed == nil {
		return true
	}
	if !s.send(*s.owed) {
		return false
	}
	s.last, s.owed = *s.owed, nil
	if s.last.State.Final() {
		s.drop()
	}
	return true
}

// SubscribeOperation pushes the operation's current state at once, then
// every change, and ends (closes the channel) after the push that reports
// it SUCCEEDED or FAILED. A state that finds the buffer full is owed: the
// latest one is pushed once it fits (see owedPush), so a slow reader may
// skip states between, never the final one. store.ErrNotFound for an
// unknown id.
func SubscribeOperation[T any](ctx context.Context, h *Hub, id uuid.UUID, conv func(resource.Operation) T) (<-chan T, error) {
	rctx, cancel := h.bounded(ctx)
	cur, err := h.reader(rctx).GetOperation(rctx, id) // right after runOperation: not behind the replica
	cancel()
	if err != nil {
		return nil, err
	}
	ch := make(chan T, 8)
	s := &opSub{id: id, last: cur}
	s.drop = func() { h.dropOp(s) }
	s.send = func(op resource.Operation) bool {
		select {
		case ch <- conv(op):
			return true
		default:
			return false
		}
	}
	s.close = func() { close(ch) }
	s.send(cur)
	if cur.State.Final() {
		s.closed = true
		s.close()
		return ch, nil
	}
	h.mu.Lock()
	if h.ops[id] == nil {
		h.ops[id] = map[*opSub]struct{}{}
	}
	h.ops[id][s] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		h.dropOp(s)
	})
	// It may have changed between the read and the registration.
	h.recheckOps(ctx, []uuid.UUID{id})
	return ch, nil
}

// dropOp removes and closes s; h.mu held.
func (h *Hub) dropOp(s *opSub) {
	if s.closed {
		return
	}
	s.closed = true
	delete(h.ops[s.id], s)
	if len(h.ops[s.id]) == 0 {
		delete(h.ops, s.id)
	}
	s.close()
}

type opBatch struct {
	ids map[uuid.UUID]bool
	all bool
}

func newOpBatch() *opBatch { return &opBatch{ids: map[uuid.UUID]bool{}} }

func (b *opBatch) add(ev notify.Event) {
	if ev.Reconnected || ev.Payload == "*" {
		b.all = true
		return
	}
	for s := range strings.SplitSeq(ev.Payload, ",") {
		if id, err := uuid.Parse(s); err == nil {
			b.ids[id] = true
		}
	}
}

// handleOperations re-reads the announced operations somebody watches.
func (h *Hub) handleOperations(ctx context.Context, b *opBatch) {
	h.mu.Lock()
	var ids []uuid.UUID
	for id := range h.ops {
		if b.all || b.ids[id] {
			ids = append(ids, id)
		}
	}
	h.mu.Unlock()
	h.recheckOps(ctx, ids)
}

func (h *Hub) recheckOps(ctx context.Context, ids []uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	rctx, cancel := h.bounded(ctx)
	ops, err := h.reader(rctx).OperationsByIDs(rctx, ids)
	cancel()
	if err != nil {
		if h.failed(ctx, "operations", err) {
			h.log.Error().Err(err).Int("ids", len(ids)).Msg("re-read announced operations; retrying")
		}
		if ctx.Err() == nil {
			h.mu.Lock()
			for _, id := range ids {
				h.reread.ops[id] = true
			}
			h.mu.Unlock()
			h.wake() // SubscribeOperation's recheck runs outside Run's loop
		}
		return
	}
	h.succeeded("operations")
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliverOps(ids, ops)
}

// deliverOps pushes each re-read operation to its subscribers (h.mu held).
// Two re-reads of one operation can be delivered out of order — the
// subscriber's own, right after it registered, runs beside the hub loop's
// — so a state older than the newest one a subscriber holds (pushed or
// owed) is dropped: a watcher never sees Running turn back into Pending.
func (h *Hub) deliverOps(ids []uuid.UUID, ops map[uuid.UUID]resource.Operation) {
	for _, id := range ids {
		op, ok := ops[id]
		if !ok {
			continue
		}
		for s := range h.ops[id] {
			if s.closed {
				continue
			}
			newest := s.last
			if s.owed != nil {
				newest = *s.owed
			}
			if olderOp(op, newest) {
				continue
			}
			if op.State == s.last.State && op.UpdatedAt.Equal(s.last.UpdatedAt) {
				s.owed = nil // what it was pushed last is current again
				continue
			}
			s.owed = &op
			if !s.retry() {
				h.owe(s)
			}
		}
	}
}

// olderOp reports whether a is an earlier state of the operation than b:
// its state comes before b's (Pending, Running, then a final one, which
// never changes again), or it is the same state updated earlier.
func olderOp(a, b resource.Operation) bool {
	ra, rb := opRank(a.State), opRank(b.State)
	if ra != rb {
		return ra < rb
	}
	return a.UpdatedAt.Before(b.UpdatedAt)
}

func opRank(s resource.OperationState) int {
	switch {
	case s == resource.OperationPending:
		return 0
	case s == resource.OperationRunning:
		return 1
	case s.Final():
		return 2
	}
	return 0
}
