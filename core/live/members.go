package live

import (
	"context"
	"fmt"
	"slices"

	"github.com/converge-run/converge/core/store/membership"
)

// Member is a registered member with its liveness derived at read time.
type Member struct {
	membership.Member
	// Ready: the last heartbeat is younger than the liveness window, by
	// the database clock that stamped it (the row's ReadAt): an API pod
	// whose clock is off judges the members as tiling and routing do.
	Ready bool
}

type memberSub struct {
	last   []string // signature of the last push
	send   func([]Member) bool
	close  func()
	closed bool
}

// ListMembers lists the membership with each member's derived status.
func (h *Hub) ListMembers(ctx context.Context) ([]Member, error) {
	ctx, cancel := h.bounded(ctx)
	defer cancel()
	list, err := h.members.List(ctx)
	if err != nil {
		return nil, err
	}
	return h.withStatus(list), nil
}

func (h *Hub) withStatus(list []membership.Member) []Member {
	now := h.opts.Clock()
	out := make([]Member, len(list))
	for i, m := range list {
		at := m.ReadAt
		if at.IsZero() {
			at = now
		}
		out[i] = Member{Member: m, Ready: at.Sub(m.LastHeartbeat) <= h.opts.Liveness}
	}
	return out
}

// signature is what a push is about: who is there, in which role, with
// which status, shard span and drain/kill request (heartbeats alone do not
// push).
func signature(ms []Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		span := "-"
		if m.Shards != nil {
			span = fmt.Sprintf("%d:%d", m.Shards.Lo, m.Shards.Hi)
		}
		out[i] = fmt.Sprintf("%s|%s|%s|%s|%t|%s", m.ID, m.Role, span, m.Version, m.Ready, m.Request.Action)
	}
	return out
}

// SubscribeMembers pushes the whole membership at once, then on every join,
// leave and status change.
func SubscribeMembers[T any](ctx context.Context, h *Hub, conv func([]Member) T) (<-chan T, error) {
	ms, err := h.ListMembers(ctx)
	if err != nil {
		return nil, err
	}
	ch := make(chan T, 4)
	s := &memberSub{last: signature(ms)}
	s.send = func(m []Member) bool {
		select {
		case ch <- conv(m):
			return true
		default:
			return false
		}
	}
	s.close = func() { close(ch) }
	s.send(ms)
	h.mu.Lock()
	h.mems[s] = struct{}{}
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !s.closed {
			s.closed = true
			delete(h.mems, s)
			s.close()
		}
	})
	return ch, nil
}

// refreshMembers re-lists the membership (when anyone subscribes) and pushes
// it to the subscribers whose last push differs.
func (h *Hub) refreshMembers(ctx context.Context) {
	h.mu.Lock()
	n := len(h.mems)
	h.mu.Unlock()
	if n == 0 {
		return
	}
	ms, err := h.ListMembers(ctx)
	if err != nil {
		if h.failed(ctx, "members", err) {
			h.log.Error().Err(err).Msg("re-list cluster members")
		}
		return
	}
	h.succeeded("members")
	sig := signature(ms)
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.mems {
		if s.closed || slices.Equal(s.last, sig) {
			continue
		}
		if s.send(ms) {
			s.last = sig
		}
	}
}
