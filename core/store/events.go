package store

import (
	"context"
	"math"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
	key := EventsKey{ResourceID: resourceID, Limit: limit, After: after}
	all, err := s.EventsFor(ctx, []EventsKey{key})
	if err != nil {
		return EventPage{}, err
	}
	return all[key], nil
}

// EventsKey asks for one page of a resource's events (ListEvents'
// arguments). It is comparable: a dataloader key.
type EventsKey struct {
	ResourceID uuid.UUID
	Limit      int
	After      string
}

// CheckEventsCursor reports whether after is a cursor an events page
// returned ("" is the first page): an *InvalidError on field "after" if not.
func CheckEventsCursor(after string) error {
	if after == "" {
		return nil
	}
	_, err := decodeIDCursor(after)
	return err
}

// EventsFor is ListEvents for many resources (the batch behind the API's
// Resource.history): one statement per distinct (limit, after), as one
// batch, each a LATERAL walk of idx_resource_events_resource per resource.
// Every key is in the map (an empty page for a resource without events).
func (s *Store) EventsFor(ctx context.Context, keys []EventsKey) (map[EventsKey]EventPage, error) {
	type shape struct {
		limit int
		after string
	}
	groups := map[shape][]uuid.UUID{}
	var order []shape
	for _, k := range keys {
		sh := shape{k.Limit, k.After}
		if _, ok := groups[sh]; !ok {
			order = append(order, sh)
		}
		groups[sh] = append(groups[sh], k.ResourceID)
	}
	out := make(map[EventsKey]EventPage, len(keys))
	if len(order) == 0 {
		return out, nil
	}
	batch := &pgx.Batch{}
	limits := make([]int, len(order))
	for i, sh := range order {
		n, err := pageLimit(sh.limit)
		if err != nil {
			return nil, err
		}
		before := int64(math.MaxInt64)
		if sh.after != "" {
			if before, err = decodeIDCursor(sh.after); err != nil {
				return nil, err
			}
		}
		limits[i] = n
		batch.Queue(`
		SELECT e.id, e.resource_id, e.type, e.reason, e.message, e.actor, e.created_at
		  FROM unnest($1::uuid[]) AS u(id)
		 CROSS JOIN LATERAL (SELECT * FROM resource_events x WHERE x.resource_id = u.id AND x.id < $2
		                      ORDER BY x.id DESC LIMIT $3) e
		 ORDER BY e.resource_id, e.id DESC`, groups[sh], before, n+1)
	}
	br := s.read.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for i, sh := range order {
		byResource, err := readEvents(br)
		if err != nil {
			return nil, err
		}
		for _, id := range groups[sh] {
			out[EventsKey{ResourceID: id, Limit: sh.limit, After: sh.after}] = newEventPage(byResource[id], limits[i])
		}
	}
	return out, nil
}

// readEvents reads the next statement's events of the batch, by resource.
func readEvents(br pgx.BatchResults) (map[uuid.UUID][]resource.Event, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, mapErr(err, "events")
	}
	defer rows.Close()
	out := map[uuid.UUID][]resource.Event{}
	for rows.Next() {
		var ev resource.Event
		var typ string
		if err := rows.Scan(&ev.ID, &ev.ResourceID, &typ, &ev.Reason, &ev.Message, &ev.Actor, &ev.CreatedAt); err != nil {
			return nil, mapErr(err, "events")
		}
		ev.Type = resource.EventType(typ)
		out[ev.ResourceID] = append(out[ev.ResourceID], ev)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "events")
	}
	return out, nil
}

// newEventPage cuts limit+1 fetched events to a page and its cursor.
func newEventPage(items []resource.Event, limit int) EventPage {
	page := EventPage{Items: items}
	if len(items) > limit {
		page.Items = items[:limit]
		page.NextCursor = encodeIDCursor(page.Items[limit-1].ID)
	}
	return page
}
