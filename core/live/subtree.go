package live

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/resource"
)

// FailureCap is the most failures one SubtreeProgress names (FailureCount
// says how many there are).
const FailureCap = 50

// SubtreeMember is one resource of a followed subtree.
type SubtreeMember struct {
	ID              uuid.UUID
	Kind            string
	Name            string
	Phase           resource.Phase
	FailureTerminal bool
	OwnerID         *uuid.UUID
	// UpdatedAt is the row's updated_at: a failure's reason is re-read when
	// it moves.
	UpdatedAt time.Time
	// Reason and Message say why a FAILED or DEGRADED member is (its most
	// specific false condition); empty for the others and the root.
	Reason, Message string
}

// KindPhaseCount is how many resources of one kind are in one phase.
type KindPhaseCount struct {
	Kind  string
	Phase resource.Phase
	Count int
}

// SubtreeProgress is a snapshot of a root's whole subtree.
type SubtreeProgress struct {
	RootID uuid.UUID
	// Root is the root itself; nil once it is gone (or when it never was).
	Root *SubtreeMember
	// Total counts the resources below the root; Ready those READY.
	Total, Ready int
	// Counts are by kind (sorted), then phase (in resource.AllPhases order),
	// non-zero only; the root is not counted.
	Counts []KindPhaseCount
	// Failures are the FAILED and DEGRADED resources below the root, by kind
	// then name, at most FailureCap, each with its Reason and Message;
	// FailureCount counts them all.
	Failures     []SubtreeMember
	FailureCount int
}

// tree is one followed root, shared by all its subscribers: loaded once,
// then kept up to date from the change announcements the hub re-reads
// anyway (no query per change), re-loaded only after a missed one.
type tree struct {
	root    uuid.UUID
	members map[uuid.UUID]SubtreeMember // the root included
	// reasons are the failure reasons read for the named failures, by id,
	// stamped with the row's updated_at they were read at.
	reasons map[uuid.UUID]SubtreeMember
	loaded  bool
	reload  bool
	dirty   bool
	subs    map[*treeSub]struct{}
}

type treeSub struct {
	send    func(SubtreeProgress) bool
	close   func()
	pending bool // owes a push (new, or its buffer was full)
	closed  bool
}

// SubscribeSubtree pushes root's subtree progress at once, then at most
// once per CountsInterval while it changes.
func SubscribeSubtree[T any](ctx context.Context, h *Hub, root uuid.UUID, conv func(SubtreeProgress) T) <-chan T {
	ch := make(chan T, 16)
	s := &treeSub{pending: true}
	s.send = func(p SubtreeProgress) bool {
		select {
		case ch <- conv(p):
			return true
		default:
			return false
		}
	}
	s.close = func() { close(ch) }
	h.mu.Lock()
	t := h.trees[root]
	if t == nil {
		t = &tree{root: root, members: map[uuid.UUID]SubtreeMember{}, reasons: map[uuid.UUID]SubtreeMember{}, reload: true,
			subs: map[*treeSub]struct{}{}}
		h.trees[root] = t
	}
	t.subs[s] = struct{}{}
	h.mu.Unlock()
	h.wake()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if s.closed {
			return
		}
		s.closed = true
		delete(t.subs, s)
		if len(t.subs) == 0 && h.trees[root] == t {
			delete(h.trees, root)
		}
		s.close()
	})
	return ch
}

func memberOf(r *resource.Resource) SubtreeMember {
	return SubtreeMember{ID: r.ID, Kind: r.Kind, Name: r.Name, Phase: r.Phase, FailureTerminal: r.FailureTerminal,
		OwnerID: r.OwnerID, UpdatedAt: r.UpdatedAt}
}

// trackTrees applies one wake's changes to the followed trees (Run's
// goroutine; h.mu held by the caller). It reports whether any tree changed.
func (h *Hub) trackTrees(changes []Change) bool {
	touched := false
	for _, t := range h.trees {
		if !t.loaded {
			continue
		}
		for _, c := range changes {
			if t.apply(c) {
				t.dirty, touched = true, true
			}
		}
	}
	return touched
}

// apply folds one change into the tree; true when the tree changed.
func (t *tree) apply(c Change) bool {
	switch c.Type {
	case Resync:
		t.reload = true
		return true
	case Deleted:
		if _, ok := t.members[c.ID]; ok {
			delete(t.members, c.ID)
			return true
		}
		return false
	}
	r := c.Resource
	_, known := t.members[c.ID]
	under := r.ID == t.root || (r.RootID != nil && *r.RootID == t.root)
	if !under && r.OwnerID != nil {
		_, under = t.members[*r.OwnerID]
	}
	if !known && !under {
		return false
	}
	m := memberOf(r)
	if old, ok := t.members[c.ID]; ok && sameMember(old, m) {
		return false
	}
	t.members[c.ID] = m
	return true
}

// sameMember reports whether a push would say the same of b as of a (a
// failing row that was written again may have a new reason).
func sameMember(a, b SubtreeMember) bool {
	failing := b.Phase == resource.PhaseFailed || b.Phase == resource.PhaseDegraded
	return a.ID == b.ID && a.Kind == b.Kind && a.Name == b.Name && a.Phase == b.Phase &&
		a.FailureTerminal == b.FailureTerminal && (!failing || a.UpdatedAt.Equal(b.UpdatedAt)) &&
		(a.OwnerID == nil) == (b.OwnerID == nil) && (a.OwnerID == nil || *a.OwnerID == *b.OwnerID)
}

// anyTrees reports whether a subtree is followed (every announced kind is
// then re-read).
func (h *Hub) anyTrees() bool { return len(h.trees) > 0 }

// refreshTrees (re)loads the trees that need it, one subtree read each,
// and pushes a snapshot to every subscriber of a changed tree and to those
// owed one. It reports whether a push is still owed (a full buffer).
func (h *Hub) refreshTrees(ctx context.Context) bool {
	h.mu.Lock()
	var load []*tree
	for _, t := range h.trees {
		if t.reload {
			load = append(load, t)
		}
	}
	h.mu.Unlock()
	for _, t := range load {
		rctx, cancel := h.bounded(ctx)
		rows, err := h.reader(rctx).SubtreeResources(rctx, t.root)
		cancel()
		if err != nil {
			if h.failed(ctx, "subtree", err) {
				h.log.Error().Err(err).Stringer("root", t.root).Msg("load a followed subtree; retrying")
			}
			continue
		}
		h.succeeded("subtree")
		members := make(map[uuid.UUID]SubtreeMember, len(rows))
		for i := range rows {
			members[rows[i].ID] = memberOf(&rows[i])
		}
		h.mu.Lock()
		t.members, t.loaded, t.reload, t.dirty = members, true, false, true
		h.mu.Unlock()
	}
	h.loadReasons(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	owed := false
	for _, t := range h.trees {
		if !t.loaded {
			owed = true
			continue
		}
		var snap *SubtreeProgress
		for s := range t.subs {
			if s.closed || (!t.dirty && !s.pending) {
				continue
			}
			if snap == nil {
				p := t.snapshot()
				snap = &p
			}
			s.pending = !s.send(*snap)
			owed = owed || s.pending
		}
		t.dirty = false
	}
	return owed
}

// ReasonBatch bounds the failures whose reasons one refresh reads (across
// every followed tree); the rest are read on the next refresh.
const ReasonBatch = 500

// loadReasons reads, in one statement for every followed tree, the
// reasons of the failures a push is about to name (at most FailureCap per
// tree) that were not read yet or whose row changed since. Only trees owing
// a push are looked at; nothing is read when no named failure is new.
func (h *Hub) loadReasons(ctx context.Context) {
	h.mu.Lock()
	want := map[uuid.UUID]time.Time{}
	for _, t := range h.trees {
		if !t.loaded || !t.owesPush() {
			continue
		}
		for _, m := range t.failures() {
			if r, ok := t.reasons[m.ID]; (!ok || !r.UpdatedAt.Equal(m.UpdatedAt)) && len(want) < ReasonBatch {
				want[m.ID] = m.UpdatedAt
			}
		}
	}
	h.mu.Unlock()
	if len(want) == 0 {
		return
	}
	ids := make([]uuid.UUID, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	rctx, cancel := h.bounded(ctx)
	conds, err := h.reader(rctx).StoredConditionsFor(rctx, ids)
	cancel()
	if err != nil {
		if h.failed(ctx, "reasons", err) {
			h.log.Error().Err(err).Int("failures", len(ids)).Msg("read the reasons of followed failures; naming them without")
		}
		return
	}
	h.succeeded("reasons")
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range h.trees {
		for id, at := range want {
			m, ok := t.members[id]
			if !ok {
				continue
			}
			m.UpdatedAt = at
			m.Reason, m.Message = FailureReason(m.Phase, conds[id])
			t.reasons[id] = m
		}
	}
}

// FailureReason picks why a FAILED or DEGRADED resource is, from its stored
// conditions: the most specific false one with a message (the kind's own,
// then Synced, then Ready); without one, the synthesized reason of phase.
func FailureReason(phase resource.Phase, stored []resource.Condition) (reason, message string) {
	rank := func(typ string) int {
		switch typ {
		case resource.ConditionReady:
			return 2
		case resource.ConditionSynced:
			return 1
		}
		return 0
	}
	best := -1
	for i, c := range stored {
		if c.Status != resource.ConditionFalse || c.Message == "" {
			continue
		}
		if best < 0 || rank(c.Type) < rank(stored[best].Type) {
			best = i
		}
	}
	if best >= 0 {
		return stored[best].Reason, stored[best].Message
	}
	if phase == resource.PhaseDegraded {
		return resource.ReasonUnavailable, "synced but observed unhealthy"
	}
	return resource.ReasonReconcileError, "the last reconcile failed (no message reported)"
}

// owesPush reports whether a refresh pushes this tree to anyone.
func (t *tree) owesPush() bool {
	if t.dirty {
		return len(t.subs) > 0
	}
	for s := range t.subs {
		if s.pending && !s.closed {
			return true
		}
	}
	return false
}

// failures are the members a push names: FAILED and DEGRADED below the
// root, by kind then name, at most FailureCap (without their reasons).
func (t *tree) failures() []SubtreeMember {
	var out []SubtreeMember
	for id, m := range t.members {
		if id != t.root && (m.Phase == resource.PhaseFailed || m.Phase == resource.PhaseDegraded) {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b SubtreeMember) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if len(out) > FailureCap {
		out = out[:FailureCap]
	}
	return out
}

// snapshot computes the tree's progress.
func (t *tree) snapshot() SubtreeProgress {
	p := SubtreeProgress{RootID: t.root}
	counts := map[string]map[resource.Phase]int{}
	for id, m := range t.members {
		if id == t.root {
			root := m
			p.Root = &root
			continue
		}
		p.Total++
		if counts[m.Kind] == nil {
			counts[m.Kind] = map[resource.Phase]int{}
		}
		counts[m.Kind][m.Phase]++
		switch m.Phase {
		case resource.PhaseReady:
			p.Ready++
		case resource.PhaseFailed, resource.PhaseDegraded:
			p.FailureCount++
		}
	}
	p.Failures = t.failures()
	for i, m := range p.Failures {
		if r, ok := t.reasons[m.ID]; ok {
			// the latest reason read (stale only while a re-read is due)
			p.Failures[i].Reason, p.Failures[i].Message = r.Reason, r.Message
		}
	}
	t.pruneReasons()
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		for _, ph := range resource.AllPhases {
			if n := counts[k][ph]; n > 0 {
				p.Counts = append(p.Counts, KindPhaseCount{Kind: k, Phase: ph, Count: n})
			}
		}
	}
	return p
}

// pruneReasons forgets the reasons of members no longer failing.
func (t *tree) pruneReasons() {
	for id := range t.reasons {
		if m, ok := t.members[id]; !ok || (m.Phase != resource.PhaseFailed && m.Phase != resource.PhaseDegraded) {
			delete(t.reasons, id)
		}
	}
}
