package live

import (
	"context"
	"slices"

	"github.com/converge-run/converge/core/resource"
)

type countSub struct {
	kind string // "" = every kind
	last []resource.PhaseCount
	// owed are the latest counts, which did not fit the buffer (nil: none
	// owed); the hub retries them until they fit (see owedPush).
	owed   []resource.PhaseCount
	send   func([]resource.PhaseCount) bool
	close  func()
	closed bool
}

// retry sends the owed counts.
func (s *countSub) retry() bool {
	if s.closed || s.owed == nil {
		return true
	}
	if !s.send(s.owed) {
		return false
	}
	s.last, s.owed = s.owed, nil
	return true
}

// SubscribePhaseCounts pushes the phase counts of kind ("" = all kinds):
// the current counts at once, then whenever they change (at most once per
// CountsInterval).
func SubscribePhaseCounts[T any](ctx context.Context, h *Hub, kind string, conv func([]resource.PhaseCount) T) <-chan T {
	ch := make(chan T, 2)
	s := &countSub{kind: kind}
	s.send = func(c []resource.PhaseCount) bool {
		select {
		case ch <- conv(c):
			return true
		default:
			return false
		}
	}
	s.close = func() { close(ch) }
	h.mu.Lock()
	h.counts[s] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !s.closed {
			s.closed = true
			delete(h.counts, s)
			s.close()
		}
	})
	h.wake() // the first push comes from Run's next recompute
	return ch
}

// refreshCounts recomputes the counts of every subscribed kind in one query
// and pushes them to the subscribers whose last push differs.
func (h *Hub) refreshCounts(ctx context.Context) {
	h.mu.Lock()
	n := len(h.counts)
	h.mu.Unlock()
	if n == 0 {
		return
	}
	rctx, cancel := h.bounded(ctx)
	byKind, err := h.reader(rctx).PhaseCountsByKind(rctx)
	cancel()
	if err != nil {
		if h.failed(ctx, "counts", err) {
			h.log.Error().Err(err).Msg("recompute phase counts; retrying")
		}
		h.mu.Lock()
		h.reread.counts = ctx.Err() == nil
		h.mu.Unlock()
		return
	}
	h.succeeded("counts")
	vector := func(kind string) []resource.PhaseCount {
		out := make([]resource.PhaseCount, len(resource.AllPhases))
		for i, p := range resource.AllPhases {
			out[i].Phase = p
			if kind != "" {
				out[i].Count = byKind[kind][p]
				continue
			}
			for _, m := range byKind {
				out[i].Count += m[p]
			}
		}
		return out
	}
	memo := map[string][]resource.PhaseCount{}
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.counts {
		v, ok := memo[s.kind]
		if !ok {
			v = vector(s.kind)
			memo[s.kind] = v
		}
		if s.closed || slices.Equal(s.last, v) {
			s.owed = nil // what it was pushed last is current again
			continue
		}
		s.owed = v
		if !s.retry() {
			h.owe(s)
		}
	}
}
