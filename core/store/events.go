package store

import (
	"context"
	"fmt"
	"math"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/resource"
)

// EventPage is one page of a resource's events, newest first.
type EventPage struct {
	Items []resource.Event
	// NextCursor continues after the last item; "" on the last page.
	NextCursor string
}

// AppendEvent appends an event to a resource's history and returns it with
// its id and time. Type defaults to Normal and Actor to "system".
func (s *Store) AppendEvent(ctx context.Context, ev resource.Event) (resource.Event, error) {
	return appendEvent(ctx, s.primary, ev)
}

func appendEvent(ctx context.Context, q querier, ev resource.Event) (resource.Event, error) {
	if ev.Type == "" {
		ev.Type = resource.EventNormal
	}
	if !ev.Type.Valid() {
		return resource.Event{}, invalid("type", "event_type_invalid", "event type must be Normal or Warning, got %q", ev.Type)
	}
	if ev.Reason == "" {
		return resource.Event{}, invalid("reason", "required", "an event needs a reason")
	}
	if ev.Actor == "" {
		ev.Actor = resource.ActorSystem
	}
	err := q.QueryRow(ctx, `
		INSERT INTO resource_events (resource_id, type, reason, message, actor)
		VALUES ($1, $2, $3, $4, $5)
		RETURNING id, created_at`, ev.ResourceID, string(ev.Type), ev.Reason, ev.Message, ev.Actor,
	).Scan(&ev.ID, &ev.CreatedAt)
	if isConstraint(err, "resource_events_resource_id_fkey") {
		return resource.Event{}, notFound("resource %s not found", ev.ResourceID)
	}
	if err != nil {
		return resource.Event{}, mapErr(err, "event of resource "+ev.ResourceID.String())
	}
	return ev, nil
}

// ListEvents returns a resource's events newest first, keyset-paginated by
// event id (after is the previous page's NextCursor). limit defaults to 50
// and is capped at 500.
func (s *Store) ListEvents(ctx context.Context, resourceID uuid.UUID, limit int, after string) (EventPage, error) {
	n, err := pageLimit(limit)
	if err != nil {
		return EventPage{}, err
	}
	before := int64(math.MaxInt64)
	if after != "" {
		if before, err = decodeIDCursor(after); err != nil {
			return EventPage{}, err
		}
	}
	rows, err := s.read.Query(ctx, `
		SELECT id, resource_id, type, reason, message, actor, created_at
		  FROM resource_events
		 WHERE resource_id = $1 AND id < $2
		 ORDER BY id DESC
		 LIMIT $3`, resourceID, before, n+1)
	if err != nil {
		return EventPage{}, mapErr(err, "events of resource "+resourceID.String())
	}
	defer rows.Close()
	var page EventPage
	for rows.Next() {
		var ev resource.Event
		var typ string
		if err := rows.Scan(&ev.ID, &ev.ResourceID, &typ, &ev.Reason, &ev.Message, &ev.Actor, &ev.CreatedAt); err != nil {
			return EventPage{}, mapErr(err, "events of resource "+resourceID.String())
		}
		ev.Type = resource.EventType(typ)
		page.Items = append(page.Items, ev)
	}
	if err := rows.Err(); err != nil {
		return EventPage{}, fmt.Errorf("events of resource %s: %w", resourceID, err)
	}
	if len(page.Items) > n {
		page.Items = page.Items[:n]
		page.NextCursor = encodeIDCursor(page.Items[n-1].ID)
	}
	return page, nil
}
