package store

// The dependency edges between resources, both ways: a resource's
// upstreams with their value flows and the resources that depend on it,
// batched per API response.

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/resource"
)

// ValueFlow copies a field of an upstream's status (Src, a JSON pointer) into
// the dependent's spec (Dep).
type ValueFlow struct {
	Src string `json:"src_field"`
	Dep string `json:"dep_field"`
}

// Dependency is one upstream edge with its value flows.
type Dependency struct {
	Upstream   resource.Resource
	ValueFlows []ValueFlow
}

// DependenciesKey asks for at most Limit upstream edges of one resource.
type DependenciesKey struct {
	ID    uuid.UUID
	Limit int
}

// DependenciesFor returns, for each key, the upstream edges of the key's
// resource (with the upstream rows), by the upstream's kind then name: at
// most Limit of them (capped at 500), the first by upstream id when it has
// more, so a resource with thousands of upstreams costs a page, not a walk
// of them all. One statement per distinct limit, as one batch; keys without
// edges are absent. The rows are fetched by LATERAL probes kept subqueries
// (OFFSET 0), here and in DependentsFor: joined on id, with the fleet's
// statistics taken while it was empty (a fleet torn down and analyzed,
// another applied), the planner walked the whole primary key for the join
// (33,000 buffers for one resource's dependents in a 10k fleet,
// TestPlans_APIUnderEmptiedFleetStatistics).
func (s *Store) DependenciesFor(ctx context.Context, keys []DependenciesKey) (map[DependenciesKey][]Dependency, error) {
	byLimit := map[int][]uuid.UUID{}
	var limits []int
	for _, k := range keys {
		if _, ok := byLimit[k.Limit]; !ok {
			limits = append(limits, k.Limit)
		}
		byLimit[k.Limit] = append(byLimit[k.Limit], k.ID)
	}
	out := make(map[DependenciesKey][]Dependency, len(keys))
	if len(limits) == 0 {
		return out, nil
	}
	batch := &pgx.Batch{}
	for _, l := range limits {
		n, err := pageLimit(l)
		if err != nil {
			return nil, err
		}
		batch.Queue(`
SELECT `+resourceColumns+`, u.id, e.value_flows
  FROM unnest($1::uuid[]) AS u(id)
 CROSS JOIN LATERAL (
        SELECT d.dependency_id, d.value_flows FROM resource_deps d
         WHERE d.dependent_id = u.id
         ORDER BY d.dependency_id
         LIMIT $2
       ) e
 CROSS JOIN LATERAL (SELECT * FROM resources r WHERE r.id = e.dependency_id OFFSET 0) r
 ORDER BY u.id, r.kind, r.name`, byLimit[l], n)
	}
	br := s.read.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for _, l := range limits {
		if err := readDependencies(br, l, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// readDependencies reads the next statement's edges of the batch into out.
func readDependencies(br pgx.BatchResults, limit int, out map[DependenciesKey][]Dependency) error {
	rows, err := br.Query()
	if err != nil {
		return mapErr(err, "dependencies")
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var flows []byte
		r, err := scanResource(rows, &id, &flows)
		if err != nil {
			return mapErr(err, "dependencies")
		}
		dep := Dependency{Upstream: r, ValueFlows: []ValueFlow{}}
		if len(flows) > 0 {
			if err := json.Unmarshal(flows, &dep.ValueFlows); err != nil {
				return fmt.Errorf("dependencies: value flows of %s: %w", id, err)
			}
		}
		k := DependenciesKey{ID: id, Limit: limit}
		out[k] = append(out[k], dep)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return mapErr(err, "dependencies")
	}
	return nil
}

// DependentsKey asks for at most Limit dependents of one resource.
type DependentsKey struct {
	ID    uuid.UUID
	Limit int
}

// DependentsFor returns, for each key, the resources whose edges point at
// the key's resource (newest first, at most Limit, capped at 500): one
// statement per distinct limit, as one batch.
func (s *Store) DependentsFor(ctx context.Context, keys []DependentsKey) (map[DependentsKey][]resource.Resource, error) {
	byLimit := map[int][]uuid.UUID{}
	var limits []int
	for _, k := range keys {
		if _, ok := byLimit[k.Limit]; !ok {
			limits = append(limits, k.Limit)
		}
		byLimit[k.Limit] = append(byLimit[k.Limit], k.ID)
	}
	out := make(map[DependentsKey][]resource.Resource, len(keys))
	if len(limits) == 0 {
		return out, nil
	}
	batch := &pgx.Batch{}
	for _, l := range limits {
		n, err := pageLimit(l)
		if err != nil {
			return nil, err
		}
		batch.Queue(`
SELECT `+resourceColumns+`, u.id
  FROM unnest($1::uuid[]) AS u(id)
 CROSS JOIN LATERAL (
        SELECT d.dependent_id FROM resource_deps d
         CROSS JOIN LATERAL (SELECT x.id, x.created_at FROM resources x WHERE x.id = d.dependent_id OFFSET 0) x
         WHERE d.dependency_id = u.id
         ORDER BY x.created_at DESC, x.id DESC
         LIMIT $2
       ) e
 CROSS JOIN LATERAL (SELECT * FROM resources r WHERE r.id = e.dependent_id OFFSET 0) r
 ORDER BY u.id, r.created_at DESC, r.id DESC`, byLimit[l], n)
	}
	br := s.read.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for _, l := range limits {
		rows, err := br.Query()
		if err != nil {
			return nil, mapErr(err, "dependents")
		}
		for rows.Next() {
			var id uuid.UUID
			r, err := scanResource(rows, &id)
			if err != nil {
				rows.Close()
				return nil, mapErr(err, "dependents")
			}
			k := DependentsKey{ID: id, Limit: l}
			out[k] = append(out[k], r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mapErr(err, "dependents")
		}
	}
	return out, nil
}
