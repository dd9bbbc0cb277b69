package live

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/notify"
)

// TestResourceBatch_CollectsOnlyTheUpsertsSomeoneWants: the ids of a kind
// no subscriber could match are not parsed, yet the kind is still noted (the
// phase counts are recomputed for it) and deletes are kept (the hub's
// memory of pushed rows forgets them).
func TestResourceBatch_CollectsOnlyTheUpsertsSomeoneWants(t *testing.T) {
	a, b, gone := uuid.New(), uuid.New(), uuid.New()
	ev := func(p string) notify.Event { return notify.Event{Channel: ChannelResources, Payload: p} }

	batch := newResourceBatch(func(kind string) bool { return kind == "a" })
	batch.add(ev("u|a|" + a.String() + "C"))
	batch.add(ev("u|b|" + b.String() + "R"))
	batch.add(ev("d|b|" + gone.String() + "R:" + uuid.Nil.String() + ":x"))

	require.Equal(t, []uuid.UUID{a}, batch.order)
	require.Equal(t, upsertNote{kind: "a", prev: resource.PhaseReconciling}, batch.upserts[a])
	require.Equal(t, map[string]bool{"a": true, "b": true}, batch.kinds)
	require.Len(t, batch.deletes, 1)
	require.Equal(t, gone, batch.deletes[0].ID)

	none := newResourceBatch(func(string) bool { return false })
	none.add(ev("u|a|" + a.String() + "C"))
	require.Empty(t, none.order)
	require.Empty(t, none.upserts)
	require.True(t, none.kinds["a"])
}

// TestWantsUpserts_FollowsTheSubscribers: no kind without subscribers, the
// subscribed kinds with kind filters, every kind once an unfiltered
// subscriber exists — asked per announcement, so a subscriber that joins
// mid-wake gets the announcements collected after it joined.
func TestWantsUpserts_FollowsTheSubscribers(t *testing.T) {
	h := &Hub{res: newResourceIndex()}
	require.False(t, h.wantsUpserts("a"))

	sa := &resourceSub{filter: ResourceFilter{Kind: "a"}}
	h.res.add(sa)
	require.True(t, h.wantsUpserts("a"))
	require.False(t, h.wantsUpserts("b"))

	all := &resourceSub{filter: ResourceFilter{}}
	h.res.add(all)
	require.True(t, h.wantsUpserts("b"))

	h.res.remove(all)
	h.res.remove(sa)
	require.False(t, h.wantsUpserts("a"))

	id := uuid.New()
	batch := newResourceBatch(h.wantsUpserts)
	batch.add(notify.Event{Channel: ChannelResources, Payload: "u|a|" + uuid.New().String() + "C"})
	h.res.add(sa) // joins while the wake is being collected
	batch.add(notify.Event{Channel: ChannelResources, Payload: "u|a|" + id.String() + "R"})
	require.Equal(t, []uuid.UUID{id}, batch.order, "only the announcement after it joined")
}
