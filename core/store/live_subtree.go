package store

import (
	"context"
	"strings"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/resource"
)

// SubtreeResources reads root and every resource below it (the owner_id
// walk of descendant_ids, one index probe per level through the owner page
// index), from the read pool: what the subscription hub (core/live) loads
// once when a subtreeProgress subscription for root starts, and again after
// a missed announcement (for every followed tree at once). Deleting and
// orphaned rows are included: a teardown is followed to its end. An unknown
// root reads as no rows. The rows come without their documents — labels,
// spec and status are left empty: the progress counts phases and names
// failures, and reading every descendant's documents cost 11 MB and 350 ms
// for a 1,000-child composition with 11 KB of spec and status a child.
func (s *Store) SubtreeResources(ctx context.Context, root uuid.UUID) ([]resource.Resource, error) {
	// One array of ids, probed by key: "r.id = $1 OR r.id IN (…)" was
	// planned as a Seq Scan of resources filtered on both, whatever their
	// sizes (an OR with a subquery has no index path).
	rows, err := s.read.Query(ctx, `SELECT `+subtreeColumns+` FROM resources r
		WHERE r.id = ANY (ARRAY[$1::uuid] || ARRAY(SELECT descendant_ids($1)))`, root)
	if err != nil {
		return nil, mapErr(err, "read the subtree of "+root.String())
	}
	list, err := collectResources(rows)
	if err != nil {
		return nil, mapErr(err, "read the subtree of "+root.String())
	}
	return list, nil
}

// subtreeColumns are resourceColumns without the documents (scanResource
// reads them all the same): labels, spec and status as empty values.
var subtreeColumns = strings.NewReplacer("r.labels", "'{}'::jsonb", "r.spec", "NULL::jsonb",
	"r.status", "NULL::jsonb").Replace(resourceColumns)
