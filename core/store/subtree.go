package store

// A composite's live subtree, as its rollup sees it.

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/resource"
)

// SubtreeNode is one live descendant of a composite as its rollup sees it.
type SubtreeNode struct {
	ID       uuid.UUID
	Kind     string
	Name     string
	Phase    resource.Phase
	HealthOK bool
	Status   json.RawMessage
	OwnerID  uuid.UUID
}

// Subtree is a composite's live subtree (orphaned and quarantined rows
// excluded, like the rollup gate) and whether it has settled: no descendant
// is still progressing (synced, or failed for its live spec).
type Subtree struct {
	Settled bool
	Nodes   []SubtreeNode
}

// SubtreeSettled reports whether every live descendant of root has settled,
// without reading them: the database's own rollup gate (rollup_gate), which
// for a top-level root stops at the first unsettled entry of
// idx_resource_phases_unsettled. A composite task calls it before ComposedSubtree,
// so a rollup that must wait costs one probe, not a read of every child.
// A root that no longer exists has nothing to wait for (true).
func (s *Store) SubtreeSettled(ctx context.Context, root uuid.UUID) (bool, error) {
	var gate *int32
	err := s.primary.QueryRow(ctx, `SELECT (SELECT rollup_gate(r.id, r.root_id IS NULL, 0) FROM resources r WHERE r.id = $1)`, root).Scan(&gate)
	if err != nil {
		return false, fmt.Errorf("probe the subtree of %s: %w", root, err)
	}
	return gate == nil || *gate == 0, nil
}

// ComposedSubtree reads the live descendants of root (WalkComposedSubtree)
// into one Subtree.
func (s *Store) ComposedSubtree(ctx context.Context, root uuid.UUID) (Subtree, error) {
	var out Subtree
	settled, err := s.WalkComposedSubtree(ctx, root, true, func(n SubtreeNode) { out.Nodes = append(out.Nodes, n) })
	if err != nil {
		return Subtree{}, err
	}
	out.Settled = settled
	return out, nil
}

// WalkComposedSubtree reads the live descendants of root by walking
// owner_id down from it and hands each to visit as it is read, in (kind,
// name) order; it reports whether the subtree has settled. A rollup builds
// its request from the rows as they arrive, so a composite of 1,000 leaves
// is never held twice (as nodes, then as the request).
//
// The walk (like SubtreeSettled's probe) is planned per call
// (pgpool.ExecMode): kept as a session's generic plan made while the tables
// were small, it read resources by Seq Scan on every later rollup
// (TestPlans_APISessionPlannedOnEmptyTables). The walk uses
// idx_resources_owner at every level (there is no plain
// root_id index; a root_id probe would read every resource), and only
// below kinds that have a composer, so a composite of 1,000 leaves is one
// index scan, not 1,000 more probes for children leaves cannot have. Each
// deeper level is a LATERAL index probe per parent, never a table scan.
// A node's Status is its own copy of the row's bytes (scanned as bytes:
// decoding it as JSON would only re-check what Postgres stored), and nil
// unless withStatus: a rollup that does not read its children's status
// does not have the database read and send a document per child.
func (s *Store) WalkComposedSubtree(ctx context.Context, root uuid.UUID, withStatus bool, visit func(SubtreeNode)) (settled bool, err error) {
	rows, err := s.primary.Query(ctx, `
WITH RECURSIVE sub AS (
    SELECT c.id, c.kind, c.version, c.name, c.phase, c.health_ok, CASE WHEN $2 THEN c.status END AS status,
           c.owner_id, c.synced_gen, c.generation, c.failure_gen, c.frozen_until, c.deletion_requested_at
      FROM resources c WHERE c.owner_id = $1
    UNION ALL
    SELECT c.id, c.kind, c.version, c.name, c.phase, c.health_ok, CASE WHEN $2 THEN c.status END,
           c.owner_id, c.synced_gen, c.generation, c.failure_gen, c.frozen_until, c.deletion_requested_at
      FROM sub p
      JOIN kind_config kc ON kc.kind = p.kind AND kc.version = p.version AND kc.has_composer
     CROSS JOIN LATERAL (SELECT * FROM resources c WHERE c.owner_id = p.id OFFSET 0) c
)
SELECT r.id, r.kind, r.name, r.phase, r.health_ok, r.status, r.owner_id,
       (r.synced_gen < r.generation AND r.failure_gen <> r.generation) AS progressing
  FROM sub r
 WHERE r.frozen_until IS NULL AND r.deletion_requested_at IS NULL
 ORDER BY r.kind, r.name`, root, withStatus)
	if err != nil {
		return false, fmt.Errorf("read subtree of %s: %w", root, err)
	}
	defer rows.Close()
	settled = true
	// One set of destinations for every row: variables taken by address
	// for each row's Scan moved to the heap, four allocations a child. pgx
	// allocates each value it scans afresh (strings, bytes, the owner id),
	// so the nodes visited share nothing.
	var (
		n           SubtreeNode
		phase       string
		status      []byte
		progressing bool
	)
	dest := []any{&n.ID, &n.Kind, &n.Name, &phase, &n.HealthOK, &status, &n.OwnerID, &progressing}
	for rows.Next() {
		n = SubtreeNode{}
		if err := rows.Scan(dest...); err != nil {
			return false, fmt.Errorf("read subtree of %s: %w", root, err)
		}
		n.Phase, n.Status = resource.Phase(phase), status
		if progressing {
			settled = false
		}
		visit(n)
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("read subtree of %s: %w", root, err)
	}
	return settled, nil
}
