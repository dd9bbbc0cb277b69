// Package cluster is the running-fleet side of a pod: it registers the
// process in cluster_members and beats, watches membership (LISTEN
// cluster_changed + a failsafe poll) and re-tiles this pod's shard range
// from the live members of its role. Every driver reads the range lock-free
// from a ShardSet on its next tick; there is no leader and no lock.
package cluster

import (
	"sync"
	"sync/atomic"

	"github.com/converge-run/converge/core/shard"
)

// ShardSet is this pod's current contiguous shard range, swapped atomically
// by the resharder and read lock-free by every driver. Writers take mu, so
// a conditional swap (SetIf) and a plain one cannot interleave. A driver
// that idles while it owns nothing (its range emptied by a lost liveness
// lock, or not tiled yet) waits on Changed too: a range handed back must
// not wait for the driver's idle poll.
type ShardSet struct {
	mu sync.Mutex
	p  atomic.Pointer[shard.Range]
	// changed is closed (and replaced) at every change of the range (mu).
	changed chan struct{}
}

// NewShardSet starts with span (use the full range for a single pod until
// the first assignment lands, or empty to own nothing).
func NewShardSet(span shard.Range) *ShardSet {
	s := &ShardSet{}
	s.Set(span)
	return s
}

// Set swaps the range and reports whether it changed.
func (s *ShardSet) Set(span shard.Range) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.swap(span)
}

// SetIf swaps the range to span if held reports true at the swap, and to
// the empty range otherwise; it reports whether the range changed. held is
// asked under the writers' lock, so a writer that empties the range after
// held turned false (the liveness lock's OnLost) is never overtaken by a
// swap that saw held true before: the range ends empty either way.
func (s *ShardSet) SetIf(span shard.Range, held func() bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !held() {
		span = shard.Range{}
	}
	return s.swap(span)
}

// swap sets span (mu held) and, when it differs, wakes Changed's waiters.
func (s *ShardSet) swap(span shard.Range) bool {
	old := s.p.Swap(&span)
	if old != nil && *old == span {
		return false
	}
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return true
}

// Changed returns a channel closed at the next change of the range (a
// re-tile, or the range emptied): take it before reading the range, and a
// change made after the read is never missed.
func (s *ShardSet) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// Span is the current half-open range.
func (s *ShardSet) Span() shard.Range {
	if p := s.p.Load(); p != nil {
		return *p
	}
	return shard.Range{}
}

// Bounds is the inclusive [lo, hi] a `shard_id BETWEEN lo AND hi` filter
// takes; ok is false when the pod owns no shard.
func (s *ShardSet) Bounds() (lo, hi int, ok bool) {
	sp := s.Span()
	if sp.Empty() {
		return 0, 0, false
	}
	return sp.Lo, sp.Last(), true
}
