package store

// A resource's direct composed children, a page per owner: the batch read
// behind the API's children field (many owners answered in one round trip).

import (
	"context"
	"slices"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/resource"
)

// ChildrenKey asks for one page of a resource's direct composed children.
// It is comparable (a dataloader key): Phases is the canonical form
// PhaseKey returns.
type ChildrenKey struct {
	OwnerID uuid.UUID
	Phases  string
	Limit   int
	After   string
}

// PhaseKey is the canonical, comparable form of a phase filter: the
// distinct phases in precedence order, comma-joined ("" = all).
func PhaseKey(phases []resource.Phase) string {
	var out []string
	for _, p := range resource.AllPhases {
		if slices.Contains(phases, p) {
			out = append(out, string(p))
		}
	}
	for _, p := range phases { // unknown phases are kept so validation names them
		if !p.Valid() && !slices.Contains(out, string(p)) {
			out = append(out, string(p))
		}
	}
	return strings.Join(out, ",")
}

func parsePhaseKey(k string) []resource.Phase {
	if k == "" {
		return nil
	}
	var out []resource.Phase
	for _, p := range strings.Split(k, ",") {
		out = append(out, resource.Phase(p))
	}
	return out
}

// ChildrenPages answers many children pages at once: one statement per
// distinct (phases, limit, after) among the keys — usually one — each a
// LATERAL per owner over the same per-phase owner index branches
// ListResources uses, all sent as one batch.
func (s *Store) ChildrenPages(ctx context.Context, keys []ChildrenKey) (map[ChildrenKey]Page, error) {
	groups := map[childrenShape][]uuid.UUID{}
	var order []childrenShape
	for _, k := range keys {
		sh := childrenShape{k.Phases, k.Limit, k.After}
		if _, ok := groups[sh]; !ok {
			order = append(order, sh)
		}
		groups[sh] = append(groups[sh], k.OwnerID)
	}
	out := make(map[ChildrenKey]Page, len(keys))
	if len(order) == 0 {
		return out, nil
	}
	batch := &pgx.Batch{}
	limits := make([]int, len(order))
	for i, sh := range order {
		limit, err := queueChildrenPage(batch, sh, groups[sh])
		if err != nil {
			return nil, err
		}
		limits[i] = limit
	}
	br := s.read.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for i, sh := range order {
		byOwner, err := readChildrenPage(br)
		if err != nil {
			return nil, err
		}
		for _, owner := range groups[sh] {
			out[ChildrenKey{OwnerID: owner, Phases: sh.phases, Limit: sh.limit, After: sh.after}] =
				newPage(byOwner[owner], limits[i])
		}
	}
	return out, nil
}

// childrenShape is what one children-page statement shares: the keys that
// differ only in their owner go in one statement.
type childrenShape struct {
	phases string
	limit  int
	after  string
}

// queueChildrenPage queues the page statement of one shape for owners and
// returns the page limit it asked for (one more row, to see a next page).
// The page's rows are fetched by a LATERAL probe of the primary key (OFFSET 0
// keeps it inside the loop over the page): as a join on id, with the fleet's
// statistics taken while it was empty (a fleet torn down and analyzed,
// another applied), the planner walked the whole primary key and probed the
// page for each entry (20,000 buffers for one owner's page of a 10k fleet,
// TestPlans_APIUnderEmptiedFleetStatistics).
func queueChildrenPage(batch *pgx.Batch, sh childrenShape, owners []uuid.UUID) (int, error) {
	limit, err := pageLimit(sh.limit)
	if err != nil {
		return 0, err
	}
	phases, err := phaseSet(parsePhaseKey(sh.phases))
	if err != nil {
		return 0, err
	}
	args := []any{owners, phases, limit + 1}
	cursor := ""
	if sh.after != "" {
		k, err := decodeKeyset(sh.after)
		if err != nil {
			return 0, err
		}
		args = append(args, k.at, k.id)
		cursor = ` AND (r.created_at, r.id) < ($4::timestamptz, $5::uuid)`
	}
	batch.Queue(`
SELECT `+resourceColumns+`, o.owner_id
  FROM unnest($1::uuid[]) AS o(owner_id)
 CROSS JOIN LATERAL (
        SELECT b.id, b.created_at
          FROM unnest($2::text[]) AS p(phase)
         CROSS JOIN LATERAL (
                SELECT r.id, r.created_at
                  FROM resource_phases r
                 WHERE r.owner_id = o.owner_id AND r.phase = p.phase`+cursor+`
                 ORDER BY r.created_at DESC, r.id DESC
                 LIMIT $3
               ) b
         ORDER BY b.created_at DESC, b.id DESC
         LIMIT $3
       ) page
 CROSS JOIN LATERAL (SELECT * FROM resources r WHERE r.id = page.id OFFSET 0) r
 ORDER BY o.owner_id, r.created_at DESC, r.id DESC`, args...)
	return limit, nil
}

// readChildrenPage reads the next statement's rows of the batch, by owner.
func readChildrenPage(br pgx.BatchResults) (map[uuid.UUID][]resource.Resource, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, mapErr(err, "children pages")
	}
	defer rows.Close()
	byOwner := map[uuid.UUID][]resource.Resource{}
	for rows.Next() {
		var owner uuid.UUID
		r, err := scanResource(rows, &owner)
		if err != nil {
			return nil, mapErr(err, "children pages")
		}
		byOwner[owner] = append(byOwner[owner], r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "children pages")
	}
	return byOwner, nil
}
