package live

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

// TestDeliverOps_AnOlderReadDeliveredLateIsDropped: a subscriber's own
// re-read (right after it registered) runs beside the hub loop's, and the
// two can deliver in either order. The older one, delivered last, used to
// be pushed as a change — a watcher saw Running, then Pending again.
func TestDeliverOps_AnOlderReadDeliveredLateIsDropped(t *testing.T) {
	id := uuid.New()
	t0 := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	pending := resource.Operation{ID: id, State: resource.OperationPending, UpdatedAt: t0}
	running := resource.Operation{ID: id, State: resource.OperationRunning, UpdatedAt: t0.Add(time.Second)}
	later := resource.Operation{ID: id, State: resource.OperationRunning, UpdatedAt: t0.Add(2 * time.Second)}
	done := resource.Operation{ID: id, State: resource.OperationSucceeded, UpdatedAt: t0.Add(3 * time.Second)}

	h := &Hub{ops: map[opKey]map[*opSub]struct{}{}, owed: map[owedPush]struct{}{}}
	ch := make(chan resource.Operation, 8)
	s := &opSub{id: id, last: pending}
	s.send = func(op resource.Operation) bool { ch <- op; return true }
	s.close = func() { close(ch) }
	s.drop = func() { h.dropOp(s) }
	h.ops[id] = map[*opSub]struct{}{s: {}}
	deliver := func(op resource.Operation) {
		h.deliverOps([]uuid.UUID{id}, map[uuid.UUID]resource.Operation{id: op})
	}

	deliver(later)   // the hub loop's read
	deliver(running) // the subscriber's own, read before it, delivered after
	deliver(pending) // and the state it was first pushed
	deliver(done)

	var got []resource.Operation
	for op := range ch {
		got = append(got, op)
	}
	require.Equal(t, []resource.Operation{later, done}, got, "pushed in the order the operation went through, then closed")
}

// TestDeliverOps_AnOlderReadDoesNotReplaceWhatIsOwed: with the buffer full,
// the newest state is owed; a late older read must not take its place.
func TestDeliverOps_AnOlderReadDoesNotReplaceWhatIsOwed(t *testing.T) {
	id := uuid.New()
	t0 := time.Date(2026, 12, 7, 1, 0, 0, 0, time.UTC)
	running := resource.Operation{ID: id, State: resource.OperationRunning, UpdatedAt: t0.Add(time.Second)}
	done := resource.Operation{ID: id, State: resource.OperationFailed, UpdatedAt: t0.Add(3 * time.Second)}

	h := &Hub{ops: map[opKey]map[*opSub]struct{}{}, owed: map[owedPush]struct{}{}}
	full := true
	s := &opSub{id: id, last: resource.Operation{ID: id, State: resource.OperationPending, UpdatedAt: t0}}
	s.send = func(resource.Operation) bool { return !full }
	s.close = func() {}
	s.drop = func() { h.dropOp(s) }
	h.ops[id] = map[*opSub]struct{}{s: {}}

	h.deliverOps([]uuid.UUID{id}, map[uuid.UUID]resource.Operation{id: done})
	h.deliverOps([]uuid.UUID{id}, map[uuid.UUID]resource.Operation{id: running})
	require.NotNil(t, s.owed)
	require.Equal(t, resource.OperationFailed, s.owed.State, "the final state stays owed")
}
