package live

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/notify"
)

// ChangeType says what happened to a resource.
type ChangeType int

// The change types.
const (
	// Upserted: created or changed; Resource is the row after the change.
	Upserted ChangeType = iota + 1
	// Deleted: the row is gone; ID, Kind, Name and OwnerID say which.
	Deleted
	// Resync: changes matching the filter may have been missed: re-query.
	Resync
)

// Change is one resource change as a subscriber receives it.
type Change struct {
	Type ChangeType
	ID   uuid.UUID
	Kind string
	Name string
	// Resource is the row after the change (Upserted only).
	Resource *resource.Resource
	// PreviousPhase is the phase before the change; "" for a created row,
	// and for Resync.
	PreviousPhase resource.Phase
	// OwnerID is the row's composing parent (nil for a root).
	OwnerID *uuid.UUID
	// RootID is the row's top-level composition root (nil for a root; for
	// a deleted row, the root the hub last saw it under, else its owner).
	RootID *uuid.UUID

	memo *memo
}

type memo struct {
	v   any
	set bool
}

// Shared converts c once and hands every matching subscriber the same
// value: fan-out happens on one goroutine, and the converted value must be
// treated as read-only by its consumers.
func Shared[T any](c Change, build func(Change) T) T {
	if c.memo == nil {
		return build(c)
	}
	if !c.memo.set {
		c.memo.v, c.memo.set = build(c), true
	}
	return c.memo.v.(T)
}

// ResourceFilter selects the changes a subscriber receives; every field is
// optional.
type ResourceFilter struct {
	Kind    string
	Name    string
	OwnerID *uuid.UUID
	// RootID keeps the changes of a root and of its whole subtree.
	RootID *uuid.UUID
	// Phases keeps a change when the row's phase before or after it is one
	// of these, so a subscriber also sees rows leave its phases.
	Phases []resource.Phase
}

func (f ResourceFilter) matches(c Change) bool {
	if c.Type == Resync { // a resync of every kind ("") reaches everyone
		return c.Kind == "" || f.Kind == "" || f.Kind == c.Kind
	}
	if f.Kind != "" && c.Kind != f.Kind {
		return false
	}
	if f.Name != "" && c.Name != f.Name {
		return false
	}
	if f.OwnerID != nil && (c.OwnerID == nil || *c.OwnerID != *f.OwnerID) {
		return false
	}
	if f.RootID != nil && c.ID != *f.RootID && (c.RootID == nil || *c.RootID != *f.RootID) {
		return false
	}
	if len(f.Phases) > 0 {
		in := c.PreviousPhase != "" && slices.Contains(f.Phases, c.PreviousPhase)
		if !in && c.Resource != nil {
			in = slices.Contains(f.Phases, c.Resource.Phase)
		}
		if !in {
			return false
		}
	}
	return true
}

type resourceSub struct {
	filter ResourceFilter
	send   func(Change) bool
	close  func()
	// overflow: a change did not fit the buffer; the subscriber is owed a
	// RESYNC (retried by the hub until it fits, see owedPush).
	overflow bool
	closed   bool
}

// retry sends the owed RESYNC.
func (s *resourceSub) retry() bool {
	if s.closed || !s.overflow {
		return true
	}
	if !s.send(Change{Type: Resync, Kind: s.filter.Kind, memo: &memo{}}) {
		return false
	}
	s.overflow = false
	return true
}

// resourceIndex files each subscriber under its most selective filter
// field, so a change is matched against its candidates only.
type resourceIndex struct {
	byName  map[string]map[*resourceSub]struct{}
	byOwner map[uuid.UUID]map[*resourceSub]struct{}
	byRoot  map[uuid.UUID]map[*resourceSub]struct{}
	byKind  map[string]map[*resourceSub]struct{}
	rest    map[*resourceSub]struct{}
	// kinds counts subscribers per kind filter ("" = any kind): a wake for
	// a kind nobody watches is not re-read.
	kinds map[string]int
}

func newResourceIndex() resourceIndex {
	return resourceIndex{
		byName:  map[string]map[*resourceSub]struct{}{},
		byOwner: map[uuid.UUID]map[*resourceSub]struct{}{},
		byRoot:  map[uuid.UUID]map[*resourceSub]struct{}{},
		byKind:  map[string]map[*resourceSub]struct{}{},
		rest:    map[*resourceSub]struct{}{},
		kinds:   map[string]int{},
	}
}

func (x *resourceIndex) bucket(s *resourceSub) map[*resourceSub]struct{} {
	add := func(m map[*resourceSub]struct{}) map[*resourceSub]struct{} {
		if m == nil {
			m = map[*resourceSub]struct{}{}
		}
		return m
	}
	switch f := s.filter; {
	case f.Name != "":
		x.byName[f.Name] = add(x.byName[f.Name])
		return x.byName[f.Name]
	case f.OwnerID != nil:
		x.byOwner[*f.OwnerID] = add(x.byOwner[*f.OwnerID])
		return x.byOwner[*f.OwnerID]
	case f.RootID != nil:
		x.byRoot[*f.RootID] = add(x.byRoot[*f.RootID])
		return x.byRoot[*f.RootID]
	case f.Kind != "":
		x.byKind[f.Kind] = add(x.byKind[f.Kind])
		return x.byKind[f.Kind]
	}
	return x.rest
}

func (x *resourceIndex) add(s *resourceSub) {
	x.bucket(s)[s] = struct{}{}
	x.kinds[s.filter.Kind]++
}

func (x *resourceIndex) remove(s *resourceSub) {
	b := x.bucket(s)
	delete(b, s)
	if len(b) == 0 {
		switch f := s.filter; {
		case f.Name != "":
			delete(x.byName, f.Name)
		case f.OwnerID != nil:
			delete(x.byOwner, *f.OwnerID)
		case f.RootID != nil:
			delete(x.byRoot, *f.RootID)
		case f.Kind != "":
			delete(x.byKind, f.Kind)
		}
	}
	if x.kinds[s.filter.Kind]--; x.kinds[s.filter.Kind] <= 0 {
		delete(x.kinds, s.filter.Kind)
	}
}

func (x *resourceIndex) len() int {
	n := 0
	for _, c := range x.kinds {
		n += c
	}
	return n
}

// interested reports whether any subscriber could match a change of kind.
func (x *resourceIndex) interested(kind string) bool {
	return x.kinds[""] > 0 || x.kinds[kind] > 0
}

// candidates calls f for every subscriber that could match c.
func (x *resourceIndex) candidates(c Change, f func(*resourceSub)) {
	each := func(m map[*resourceSub]struct{}) {
		for s := range m {
			f(s)
		}
	}
	if c.Type == Resync {
		each(x.rest)
		for _, m := range x.byName {
			each(m)
		}
		for _, m := range x.byOwner {
			each(m)
		}
		for _, m := range x.byRoot {
			each(m)
		}
		for _, m := range x.byKind {
			each(m)
		}
		return
	}
	each(x.byName[c.Name])
	if c.OwnerID != nil {
		each(x.byOwner[*c.OwnerID])
	}
	each(x.byRoot[c.ID])
	if c.RootID != nil {
		each(x.byRoot[*c.RootID])
	}
	each(x.byKind[c.Kind])
	each(x.rest)
}

// SubscribeResources registers a resource-change subscriber until ctx is
// done; conv turns each matching change into the channel's element (use
// Shared to convert once for all subscribers).
func SubscribeResources[T any](ctx context.Context, h *Hub, f ResourceFilter, conv func(Change) T) <-chan T {
	ch := make(chan T, h.opts.Buffer)
	s := &resourceSub{filter: f}
	s.send = func(c Change) bool {
		select {
		case ch <- conv(c):
			return true
		default:
			return false
		}
	}
	s.close = func() { close(ch) }
	h.mu.Lock()
	h.res.add(s)
	h.mu.Unlock()
	context.AfterFunc(ctx, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if !s.closed {
			s.closed = true
			h.res.remove(s)
			s.close()
		}
	})
	return ch
}

// resourceBatch is what one wake collected: the announced ids, the deleted
// rows and the "many" markers.
type resourceBatch struct {
	// wants says whether an upserted row of a kind could reach a subscriber
	// (Hub.wantsUpserts); the ids of other kinds are not parsed. With no
	// subscriber at all, a wake costs a look at each payload's head.
	wants   func(kind string) bool
	upserts map[uuid.UUID]upsertNote
	order   []uuid.UUID
	deletes []Change
	many    map[string]bool // kinds past the cap ("" = any)
	kinds   map[string]bool // every kind announced
	lost    bool            // the listener dropped events or reconnected
}

type upsertNote struct {
	kind string
	prev resource.Phase
}

func newResourceBatch(wants func(kind string) bool) *resourceBatch {
	return &resourceBatch{wants: wants, upserts: map[uuid.UUID]upsertNote{}, many: map[string]bool{}, kinds: map[string]bool{}}
}

// wantsUpserts reports whether an upserted row of kind could reach a
// subscriber now: any kind while a subtree is followed or an unfiltered
// subscriber exists, a subscribed kind otherwise. It is asked per
// announcement as the wake collects them, so a subscriber gets every
// change announced after it subscribed, and nothing is parsed for nobody.
func (h *Hub) wantsUpserts(kind string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.anyTrees() || h.res.interested(kind)
}

var phaseCodes = map[byte]resource.Phase{
	'D': resource.PhaseDeleting, 'Q': resource.PhaseQuarantined, 'F': resource.PhaseFailed,
	'O': resource.PhaseOrphaned, 'G': resource.PhaseDegraded, 'R': resource.PhaseReady,
	'C': resource.PhaseReconciling,
}

// add parses one notification (the payload formats are 00004_announce.sql's).
func (b *resourceBatch) add(ev notify.Event) {
	if ev.Reconnected {
		b.lost = true
		return
	}
	op, rest, ok := strings.Cut(ev.Payload, "|")
	if !ok {
		return
	}
	kind, items, _ := strings.Cut(rest, "|")
	b.kinds[kind] = true
	switch op {
	case "m":
		b.many[kind] = true
	case "u":
		if !b.wants(kind) {
			return
		}
		for item := range strings.SplitSeq(items, ",") {
			if len(item) != 37 {
				continue
			}
			id, err := uuid.Parse(item[:36])
			if err != nil {
				continue
			}
			if _, seen := b.upserts[id]; seen { // keep the phase before the first change
				continue
			}
			b.upserts[id] = upsertNote{kind: kind, prev: phaseCodes[item[36]]}
			b.order = append(b.order, id)
		}
	case "d":
		for item := range strings.SplitSeq(items, ",") {
			head, name, ok1 := strings.Cut(item, ":")
			owner, name, ok2 := strings.Cut(name, ":")
			if !ok1 || !ok2 || len(head) != 37 {
				continue
			}
			id, err := uuid.Parse(head[:36])
			if err != nil {
				continue
			}
			c := Change{Type: Deleted, ID: id, Kind: kind, Name: name, PreviousPhase: phaseCodes[head[36]]}
			if o, err := uuid.Parse(owner); err == nil {
				c.OwnerID = &o
			}
			b.deletes = append(b.deletes, c)
		}
	}
}

// handleResources re-reads and fans out one wake's batch. It reports
// whether phase counts may have changed, and whether a followed subtree did.
func (h *Hub) handleResources(ctx context.Context, b *resourceBatch) (counts, trees bool) {
	h.mu.Lock()
	var ids []uuid.UUID
	all := h.anyTrees()
	for _, id := range b.order {
		if all || h.res.interested(b.upserts[id].kind) {
			ids = append(ids, id)
		}
	}
	h.mu.Unlock()

	var changes []Change
	if len(ids) > 0 {
		rctx, cancel := h.bounded(ctx)
		rows, err := h.reader(rctx).ResourcesByIDs(rctx, ids)
		cancel()
		if err != nil {
			if h.failed(ctx, "resources", err) {
				h.log.Error().Err(err).Int("ids", len(ids)).Msg("re-read announced resources; subscribers resync")
			}
			b.lost = true
		} else {
			h.succeeded("resources")
		}
		for _, id := range ids {
			r, ok := rows[id]
			if !ok { // deleted since: its delete announcement follows
				continue
			}
			if !h.seen.changed(id, r) { // an earlier wake already pushed this state
				continue
			}
			changes = append(changes, Change{Type: Upserted, ID: id, Kind: r.Kind, Name: r.Name, Resource: &r,
				PreviousPhase: b.upserts[id].prev, OwnerID: r.OwnerID, RootID: r.RootID})
		}
	}
	for i := range b.deletes {
		b.deletes[i].RootID = h.seen.rootOf(b.deletes[i].ID, b.deletes[i].OwnerID)
		h.seen.forget(b.deletes[i].ID)
	}
	changes = append(changes, b.deletes...)
	switch {
	case b.lost:
		changes = append(changes, Change{Type: Resync})
	default:
		for kind := range b.many {
			changes = append(changes, Change{Type: Resync, Kind: kind})
		}
	}

	h.mu.Lock()
	trees = h.trackTrees(changes)
	for _, c := range changes {
		c.memo = &memo{}
		h.res.candidates(c, func(s *resourceSub) {
			if s.closed || !s.filter.matches(c) {
				return
			}
			if !s.retry() { // still owed a RESYNC: this change is covered by it
				return
			}
			if !s.send(c) {
				s.overflow = true
				h.owe(s)
			}
		})
	}
	h.mu.Unlock()
	return len(b.kinds) > 0 || b.lost, trees
}

// seenStates remembers a fingerprint of the last state pushed for each
// resource, so a row re-read by two wakes (its insert and its update
// announced separately, the second re-read finding nothing new) is pushed
// once. Bounded: past maxSeen entries it starts over, which costs at most a
// duplicate push. Used by Run's goroutine only.
type seenStates struct {
	m map[uuid.UUID]uint64
	// roots remembers each seen row's root, for its delete (whose payload
	// names only the owner).
	roots map[uuid.UUID]uuid.UUID
}

const maxSeen = 200000

func (s *seenStates) changed(id uuid.UUID, r resource.Resource) bool {
	fp := fingerprint(r)
	if s.m == nil || len(s.m) >= maxSeen {
		s.m = make(map[uuid.UUID]uint64, 1024)
		s.roots = make(map[uuid.UUID]uuid.UUID, 1024)
	}
	if r.RootID != nil {
		s.roots[id] = *r.RootID
	}
	if old, ok := s.m[id]; ok && old == fp {
		return false
	}
	s.m[id] = fp
	return true
}

func (s *seenStates) forget(id uuid.UUID) {
	delete(s.m, id)
	delete(s.roots, id)
}

// rootOf is a deleted row's root: the one it was last seen under, else its
// owner's, else its owner (a direct child of a root); nil for a root.
func (s *seenStates) rootOf(id uuid.UUID, owner *uuid.UUID) *uuid.UUID {
	if r, ok := s.roots[id]; ok {
		return &r
	}
	if owner == nil {
		return nil
	}
	if r, ok := s.roots[*owner]; ok {
		return &r
	}
	o := *owner
	return &o
}

// fingerprint hashes every field a subscriber can see.
func fingerprint(r resource.Resource) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s|%s|%s|%d|%d|%d|%t|%d|%t|%t|%v|%v|%v|%v|%s|%d|%v|%v|", r.Phase, r.Version, r.Name, r.Generation,
		r.SyncedGen, r.ComposedGen, r.HealthOK, r.FailureGen, r.FailureTerminal, r.Quarantined, r.Finalizers,
		r.DeletionRequestedAt, r.FrozenUntil, r.OwnerID, r.ProviderConfigRef, r.ShardID, r.UpdatedAt.UnixNano(), r.Labels)
	_, _ = h.Write(r.Spec)
	_, _ = h.Write([]byte{0})
	_, _ = h.Write(r.Status)
	return h.Sum64()
}
