package store

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
)

func TestEvents_AppendAndPageNewestFirst(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	r := e.noop(t, "r", nil)
	other := e.noop(t, "other", nil)
	want := []string{"Created"}
	for i := range 6 {
		typ := resource.EventNormal
		if i%2 == 1 {
			typ = resource.EventWarning
		}
		ev, err := e.store.AppendEvent(ctx, resource.Event{ResourceID: r.ID, Type: typ, Reason: fmt.Sprintf("Step%d", i),
			Message: "m", Actor: "alice"})
		require.NoError(t, err)
		require.Positive(t, ev.ID)
		require.False(t, ev.CreatedAt.IsZero())
		want = append(want, ev.Reason)
	}
	_, err := e.store.AppendEvent(ctx, resource.Event{ResourceID: other.ID, Reason: "Elsewhere"})
	require.NoError(t, err)

	var got []resource.Event
	after := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10)
		page, err := e.store.ListEvents(ctx, r.ID, 3, after)
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Items), 3)
		got = append(got, page.Items...)
		if page.NextCursor == "" {
			break
		}
		after = page.NextCursor
	}
	var reasons []string
	for i := len(got) - 1; i >= 0; i-- {
		reasons = append(reasons, got[i].Reason)
		require.Equal(t, r.ID, got[i].ResourceID)
	}
	if diff := cmp.Diff(want, reasons); diff != "" {
		t.Errorf("events oldest first (-want +got):\n%s", diff)
	}
	require.Equal(t, resource.EventWarning, got[0].Type)
	require.Equal(t, "alice", got[0].Actor)
	require.Equal(t, resource.ActorSystem, got[len(got)-1].Actor, "the store's own events default to system")
}

func TestAppendEvent_Rejections(t *testing.T) {
	t.Parallel()
	e := newEnvWithKinds(t)
	ctx := context.Background()
	r := e.noop(t, "r", nil)
	before := e.tableCounts(t)
	_, err := e.store.AppendEvent(ctx, resource.Event{ResourceID: r.ID, Type: "Info", Reason: "X"})
	requireInvalid(t, err, "type", "event_type_invalid")
	_, err = e.store.AppendEvent(ctx, resource.Event{ResourceID: r.ID})
	requireInvalid(t, err, "reason", "required")
	_, err = e.store.AppendEvent(ctx, resource.Event{ResourceID: uuid.New(), Reason: "X"})
	require.ErrorIs(t, err, ErrNotFound)
	if diff := cmp.Diff(before, e.tableCounts(t)); diff != "" {
		t.Errorf("rejected events wrote rows (-before +after):\n%s", diff)
	}
	_, err = e.store.ListEvents(ctx, r.ID, -1, "")
	requireInvalid(t, err, "first", "limit_invalid")
	_, err = e.store.ListEvents(ctx, r.ID, 10, "????")
	requireInvalid(t, err, "after", "cursor_invalid")
}
