// Package childcols writes and reads a rollup's subtree as columns
// (workerv1.ChildColumns): the broker builds them from the rows it reads,
// the Go worker SDK reads them back into per-child summaries, and the broker
// spells them out as a ChildSummary list for a worker that did not ask for
// columns.
package childcols

import (
	"fmt"

	"github.com/google/uuid"

	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// Builder accumulates one rollup's descendants. The zero value is not
// ready; use New.
type Builder struct {
	root      uuid.UUID
	statuses  bool
	cols      *workerv1.ChildColumns
	ownerIDs  []uuid.UUID // per child; resolved to positions by Finish
	lastKind  uint32
	foreign   bool // some child's owner is not the root
	finishing map[uuid.UUID]uint32
}

// New starts the columns of root's subtree; sizeHint is the expected number
// of descendants (0 when unknown). withStatus says whether each child's
// status document is carried (the rollup's reaction reads childStatus).
func New(root uuid.UUID, sizeHint int, withStatus bool) *Builder {
	b := &Builder{root: root, statuses: withStatus}
	b.reset(sizeHint)
	return b
}

func (b *Builder) reset(n int) {
	b.cols = &workerv1.ChildColumns{
		Ids:    make([]byte, 0, 16*n),
		Kinds:  make([]uint32, 0, n),
		Names:  make([]string, 0, n),
		Phases: make([]uint32, 0, n),
		Owners: make([]uint32, 0, n),
	}
	if b.statuses {
		b.cols.Statuses = make([][]byte, 0, n)
	}
	b.ownerIDs = b.ownerIDs[:0]
	b.lastKind, b.foreign = 0, false
}

// Reset drops what was added (a retried read starts over), keeping the
// capacity.
func (b *Builder) Reset() { b.reset(cap(b.cols.Names)) }

// Len is the number of descendants added.
func (b *Builder) Len() int { return len(b.cols.Names) }

// Add appends one descendant. status is ignored unless the builder carries
// statuses.
func (b *Builder) Add(id uuid.UUID, kind, name, phase string, healthOK bool, status []byte, owner uuid.UUID) {
	c := b.cols
	i := uint32(len(c.Names))
	c.Ids = append(c.Ids, id[:]...)
	c.Kinds = append(c.Kinds, b.kindIndex(kind))
	c.Names = append(c.Names, name)
	c.Phases = append(c.Phases, index(&c.PhaseNames, phase))
	if !healthOK {
		c.Unhealthy = append(c.Unhealthy, i)
	}
	if b.statuses {
		c.Statuses = append(c.Statuses, status)
	}
	c.Owners = append(c.Owners, 0)
	b.ownerIDs = append(b.ownerIDs, owner)
	if owner != b.root {
		b.foreign = true
	}
}

// kindIndex looks kind up, the previous child's first: children arrive in
// kind order.
func (b *Builder) kindIndex(kind string) uint32 {
	names := b.cols.KindNames
	if int(b.lastKind) < len(names) && names[b.lastKind] == kind {
		return b.lastKind
	}
	b.lastKind = index(&b.cols.KindNames, kind)
	return b.lastKind
}

// index returns s's position in *names, appending it when absent (the
// lists are a handful of kinds or phases long).
func index(names *[]string, s string) uint32 {
	for i, n := range *names {
		if n == s {
			return uint32(i)
		}
	}
	*names = append(*names, s)
	return uint32(len(*names) - 1)
}

// Finish resolves owners to positions and returns the columns. It fails
// when a descendant's owner is neither the root nor in the list (the walk
// did not read a whole subtree).
func (b *Builder) Finish() (*workerv1.ChildColumns, error) {
	c := b.cols
	if b.foreign {
		pos := b.finishing
		if pos == nil {
			pos = make(map[uuid.UUID]uint32, len(b.ownerIDs))
			b.finishing = pos
		}
		clear(pos)
		for i := range b.ownerIDs {
			pos[uuid.UUID(c.Ids[16*i:16*i+16])] = uint32(i) + 1
		}
		for i, o := range b.ownerIDs {
			if o == b.root {
				continue
			}
			j, ok := pos[o]
			if !ok {
				return nil, fmt.Errorf("child %s of the subtree of %s: its owner %s is not in the subtree",
					uuid.UUID(c.Ids[16*i:16*i+16]), b.root, o)
			}
			c.Owners[i] = j
		}
	}
	return c, nil
}

// Child is one descendant read back from the columns. ID and OwnerID are
// canonical uuid strings; Status aliases the message's bytes (nil for none).
type Child struct {
	ID, Kind, Name, Phase string
	HealthOK              bool
	Status                []byte
	OwnerID               string
}

// Len is the number of descendants c describes.
func Len(c *workerv1.ChildColumns) int { return len(c.GetNames()) }

// Walk checks c and hands each descendant to fn in order. rootID is the
// rollup's own resource id (the owner named by 0). It checks everything
// before calling fn once: a malformed message (a column of the wrong length,
// an index out of range) is an error and fn is never called.
func Walk(c *workerv1.ChildColumns, rootID string, fn func(Child)) error {
	if err := Check(c); err != nil {
		return err
	}
	n := Len(c)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.UUID(c.GetIds()[16*i : 16*i+16]).String()
	}
	un := c.GetUnhealthy()
	for i := range n {
		ch := Child{ID: ids[i], Kind: c.GetKindNames()[c.GetKinds()[i]], Name: c.GetNames()[i],
			Phase: c.GetPhaseNames()[c.GetPhases()[i]], HealthOK: true, OwnerID: rootID}
		if len(un) > 0 && un[0] == uint32(i) {
			ch.HealthOK, un = false, un[1:]
		}
		if o := c.GetOwners()[i]; o > 0 {
			ch.OwnerID = ids[o-1]
		}
		if st := c.GetStatuses(); len(st) > 0 && len(st[i]) > 0 {
			ch.Status = st[i]
		}
		fn(ch)
	}
	return nil
}

// Check reports the first inconsistency in c, naming the column.
func Check(c *workerv1.ChildColumns) error {
	n := Len(c)
	switch {
	case len(c.GetIds()) != 16*n:
		return fmt.Errorf("rollup columns: ids holds %d bytes for %d children (16 each)", len(c.GetIds()), n)
	case len(c.GetKinds()) != n:
		return fmt.Errorf("rollup columns: kinds has %d entries for %d children", len(c.GetKinds()), n)
	case len(c.GetPhases()) != n:
		return fmt.Errorf("rollup columns: phases has %d entries for %d children", len(c.GetPhases()), n)
	case len(c.GetOwners()) != n:
		return fmt.Errorf("rollup columns: owners has %d entries for %d children", len(c.GetOwners()), n)
	case len(c.GetStatuses()) != 0 && len(c.GetStatuses()) != n:
		return fmt.Errorf("rollup columns: statuses has %d entries for %d children (all or none)", len(c.GetStatuses()), n)
	}
	for i, k := range c.GetKinds() {
		if int(k) >= len(c.GetKindNames()) {
			return fmt.Errorf("rollup columns: child %d names kind %d of %d", i, k, len(c.GetKindNames()))
		}
	}
	for i, p := range c.GetPhases() {
		if int(p) >= len(c.GetPhaseNames()) {
			return fmt.Errorf("rollup columns: child %d names phase %d of %d", i, p, len(c.GetPhaseNames()))
		}
	}
	for i, o := range c.GetOwners() {
		if int(o) > n || int(o) == i+1 {
			return fmt.Errorf("rollup columns: child %d names owner %d (0 for the root, 1..%d for a child other than itself)", i, o, n)
		}
	}
	prev := -1
	for _, u := range c.GetUnhealthy() {
		if int(u) >= n || int(u) <= prev {
			return fmt.Errorf("rollup columns: unhealthy must list child positions below %d in ascending order, got %d after %d", n, u, prev)
		}
		prev = int(u)
	}
	return nil
}

// Summaries spells c out as one ChildSummary per descendant, for a worker
// that did not ask for columns.
func Summaries(c *workerv1.ChildColumns, rootID string) ([]*workerv1.ChildSummary, error) {
	out := make([]*workerv1.ChildSummary, 0, Len(c))
	err := Walk(c, rootID, func(ch Child) {
		out = append(out, &workerv1.ChildSummary{Id: ch.ID, Kind: ch.Kind, Name: ch.Name, Phase: ch.Phase,
			HealthOk: ch.HealthOK, StatusJson: ch.Status, OwnerId: ch.OwnerID})
	})
	return out, err
}
