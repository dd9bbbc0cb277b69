package pipeline

// The edges' part of a compose's plan: resolving their endpoints, checking
// them (no duplicate, no self-edge, no cycle, none to a pruned child), and
// the value flows they bootstrap into the children's specs.

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/db/pgpool"
)

// resolveDependencies resolves the edges' dependencies outside the
// composition (by kind and name) to ids, and reports which are marked for
// deletion. They are key-share locked in id order and their marks read
// under the lock: a dependency marked before the lock was granted is seen
// here; one whose mark comes after waits for this transaction, and the
// mark's next read of its tree finds the new edge
// (cascade_mark_for_deletion).
func resolveDependencies(ctx context.Context, tx pgx.Tx, c Composition) (map[childKey]uuid.UUID, map[uuid.UUID]bool, error) {
	var ek, en []string
	for _, e := range c.Edges {
		if e.Dependency.Child == "" {
			ek, en = append(ek, e.Dependency.Kind), append(en, e.Dependency.Name)
		}
	}
	external, deleting := map[childKey]uuid.UUID{}, map[uuid.UUID]bool{}
	if len(ek) == 0 {
		return external, deleting, nil
	}
	rows, err := tx.Query(ctx, `
SELECT r.kind, r.name, r.id, r.deletion_requested_at IS NOT NULL
  FROM resources r
 WHERE r.id = ANY (ARRAY(
       SELECT x.id
         FROM unnest($1::text[], $2::text[]) AS k(kind, name)
        CROSS JOIN LATERAL (SELECT x.id FROM resources x WHERE x.kind = k.kind AND x.name = k.name OFFSET 0) x))
 ORDER BY r.id
   FOR KEY SHARE`, ek, en)
	if err != nil {
		return nil, nil, wrap(err, "compose: resolve edge dependencies")
	}
	defer rows.Close()
	for rows.Next() {
		var k childKey
		var id uuid.UUID
		var marked bool
		if err := rows.Scan(&k.kind, &k.name, &id, &marked); err != nil {
			return nil, nil, wrap(err, "compose: resolve edge dependencies")
		}
		external[k], deleting[id] = id, marked
	}
	if err := rows.Err(); err != nil {
		return nil, nil, wrap(err, "compose: resolve edge dependencies")
	}
	return external, deleting, nil
}

// planEdges resolves the edges' endpoints and checks them: known children
// or existing resources, no duplicates, no self-edge, no cycle among the
// children, and no edge to a child of the root that this composition
// prunes.
func planEdges(ctx context.Context, tx pgx.Tx, st *composeState, plan *composePlan, c Composition) error {
	external, deleting, err := resolveDependencies(ctx, tx, c)
	if err != nil {
		return err
	}
	var kept map[uuid.UUID]bool // the children kept, read only for an edge to an owned resource outside the composition
	isKept := func(id uuid.UUID) bool {
		if kept == nil {
			kept = make(map[uuid.UUID]bool, len(plan.keep))
			for _, k := range plan.keep {
				kept[k] = true
			}
		}
		return kept[id]
	}
	// Sized for the edges: grown as they came, the maps and the list were
	// a tenth of the bytes converge allocated in a 200k run.
	type pair struct{ dep, up uuid.UUID }
	seen := make(map[pair]bool, len(c.Edges))
	encoded := map[flowList][]byte{}
	next := make(map[uuid.UUID][]uuid.UUID, len(c.Edges))
	plan.edges = slices.Grow(plan.edges, len(c.Edges))
	for _, e := range c.Edges {
		dep, ok := plan.ids[e.Dependent]
		if !ok {
			return composeErr(e.Dependent, "unknown_dependent", "edge from %q: no such child", e.Dependent)
		}
		if plan.skip[e.Dependent] {
			continue // a child being torn down keeps the edges it has
		}
		var up uuid.UUID
		if e.Dependency.Child != "" {
			if up, ok = plan.ids[e.Dependency.Child]; !ok {
				return composeErr(e.Dependent, "unknown_dependency", "edge to child %q: no such child", e.Dependency.Child)
			}
			if plan.skip[e.Dependency.Child] {
				// Being torn down. An edge it had when it was marked is a
				// marked dependent's, skipped above; this one would be new,
				// and hold its teardown for good.
				return composeErr(e.Dependent, RuleDependencyDeleting,
					"edge to child %q: it is being deleted; composed again once it is gone", e.Dependency.Child)
			}
		} else if up, ok = external[childKey{e.Dependency.Kind, e.Dependency.Name}]; !ok {
			return composeErr(e.Dependent, "unknown_dependency", "edge to %s/%s: no such resource", e.Dependency.Kind, e.Dependency.Name)
		} else if deleting[up] {
			return composeErr(e.Dependent, RuleDependencyDeleting,
				"edge to %s/%s: it is being deleted; composed again once it is gone", e.Dependency.Kind, e.Dependency.Name)
		} else if o, owned := st.owned[childKey{e.Dependency.Kind, e.Dependency.Name}]; owned && o.id == up && !isKept(up) && !o.quarantined {
			// Pruned by this very compose: a hard delete would fail the
			// edge's foreign key, and a teardown would wait for the new
			// dependent for good.
			return composeErr(e.Dependent, "dependency_pruned",
				"edge to %s/%s: a child of this root the composition no longer emits, so it is pruned; emit it, or drop the edge",
				e.Dependency.Kind, e.Dependency.Name)
		}
		if up == dep {
			return composeErr(e.Dependent, "edge_self", "a child cannot depend on itself")
		}
		if seen[pair{dep, up}] {
			return composeErr(e.Dependent, "duplicate_edge", "two edges from %q to the same dependency", e.Dependent)
		}
		seen[pair{dep, up}] = true
		for _, f := range e.ValueFlows {
			if len(f.SrcField) < 2 || f.SrcField[0] != '/' || len(f.DepField) < 2 || f.DepField[0] != '/' {
				return composeErr(e.Dependent, "value_flow_invalid",
					"value flow %q → %q: both fields must be JSON pointers like /vpc_id", f.SrcField, f.DepField)
			}
		}
		flows := encodeFlows(e.ValueFlows, encoded)
		plan.edges = append(plan.edges, plannedEdge{dep: dep, up: up, flows: flows})
		next[dep] = append(next[dep], up)
	}
	if name := cycle(next, plan.children); name != "" {
		return composeErr(name, "edge_cycle", "the edges form a cycle through %q: it would never be scheduled", name)
	}
	return externalCycle(ctx, tx, plan, next, external)
}

// externalCycle refuses edges that close a cycle through resources outside
// the composition: a child depending on a resource that already depends,
// through the stored edges, on a child of this composition (another
// composition's child that names ours, say). Neither composition sees the
// cycle alone, and a delete of either tree then waits for good: each node
// waits for its dependents to be deleted first. The stored edges are walked
// up from the external dependencies, stopping at this composition's
// children (whose stored edges this compose replaces): a child reached from
// an external dependency stands for it in the cycle check.
func externalCycle(ctx context.Context, tx pgx.Tx, plan *composePlan, next map[uuid.UUID][]uuid.UUID, external map[childKey]uuid.UUID) error {
	if len(external) == 0 {
		return nil
	}
	ups := make([]uuid.UUID, 0, len(external))
	for _, id := range external {
		ups = append(ups, id)
	}
	children := make([]uuid.UUID, len(plan.children))
	for i, ch := range plan.children {
		children[i] = ch.id
	}
	rows, err := tx.Query(ctx, `
WITH RECURSIVE up(origin, id) AS (
    SELECT x, x FROM unnest($1::uuid[]) AS x
  UNION
    SELECT up.origin, d.dependency_id
      FROM up
     CROSS JOIN LATERAL (SELECT d.dependency_id FROM resource_deps d WHERE d.dependent_id = up.id OFFSET 0) d
     WHERE up.id <> ALL ($2::uuid[])
)
SELECT origin, id FROM up WHERE id = ANY ($2::uuid[])`, ups, children)
	if err != nil {
		return wrap(err, "compose: walk the external dependencies' edges")
	}
	defer rows.Close()
	reached := map[uuid.UUID][]uuid.UUID{}
	for rows.Next() {
		var origin, child uuid.UUID
		if err := rows.Scan(&origin, &child); err != nil {
			return wrap(err, "compose: walk the external dependencies' edges")
		}
		reached[origin] = append(reached[origin], child)
	}
	if err := rows.Err(); err != nil {
		return wrap(err, "compose: walk the external dependencies' edges")
	}
	if len(reached) == 0 {
		return nil
	}
	for dep, upstreams := range next {
		for _, up := range upstreams {
			next[dep] = append(next[dep], reached[up]...)
		}
	}
	if name := cycle(next, plan.children); name != "" {
		return composeErr(name, "edge_cycle",
			"the edges form a cycle through %q and resources outside the composition: deleting them would wait for good", name)
	}
	return nil
}

// encodeFlows is an edge's value flows as JSON. Edges that share a list (a
// composition read from columns shares one per distinct list) share its
// encoding, kept in encoded by the list's first element and length.
func encodeFlows(flows []ValueFlow, encoded map[flowList][]byte) []byte {
	if len(flows) == 0 {
		return []byte(`[]`)
	}
	key := flowList{&flows[0], len(flows)}
	if b, ok := encoded[key]; ok {
		return b
	}
	b, _ := json.Marshal(flows) // strings only: always marshals
	encoded[key] = b
	return b
}

// flowList identifies a list of value flows by where it is.
type flowList struct {
	first *ValueFlow
	n     int
}

// cycle returns the name of a child on a dependency cycle, or "".
func cycle(next map[uuid.UUID][]uuid.UUID, children []plannedChild) string {
	const (
		unseen = iota
		active
		done
	)
	state := map[uuid.UUID]int{}
	var visit func(id uuid.UUID) bool
	visit = func(id uuid.UUID) bool {
		switch state[id] {
		case active:
			return true
		case done:
			return false
		}
		state[id] = active
		for _, up := range next[id] {
			if visit(up) {
				return true
			}
		}
		state[id] = done
		return false
	}
	for _, ch := range children {
		if visit(ch.id) {
			return ch.Name
		}
	}
	return ""
}

// bootstrapFlows substitutes value flows from upstreams that already have
// status into the children's desired specs, with the function the drainer
// uses (apply_value_flows), so a recompose reproduces the values the drainer
// wrote and never reverts them.
func bootstrapFlows(ctx context.Context, tx pgx.Tx, plan *composePlan) error {
	if len(plan.edges) == 0 {
		return nil
	}
	idx := make(map[uuid.UUID]int, len(plan.children))
	for i, ch := range plan.children {
		idx[ch.id] = i
	}
	// Only the edges whose upstream may have a status: a child this
	// composition creates has none yet (a first composition sends nothing),
	// and only their dependents' specs go to the statement.
	var (
		deps  pgpool.Array[int32] // per edge, the position of its dependent in specs
		ups   pgpool.Array[uuid.UUID]
		flows pgpool.Array[json.RawMessage]
		specs pgpool.Array[json.RawMessage]
		child []int // per entry of specs, the plan's child
	)
	pos := map[int]int32{}
	for _, e := range plan.edges {
		if u, sibling := idx[e.up]; string(e.flows) == "[]" || (sibling && plan.children[u].isNew) {
			continue
		}
		i := idx[e.dep]
		p, ok := pos[i]
		if !ok {
			p = int32(len(specs))
			pos[i] = p
			specs, child = append(specs, plan.children[i].spec), append(child, i)
		}
		deps, ups, flows = append(deps, p), append(ups, e.up), append(flows, e.flows)
	}
	if len(deps) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `
SELECT e.dep, apply_value_flows(($1::jsonb[])[e.dep + 1], jsonb_agg(jsonb_build_array(e.flows, u.status) ORDER BY e.ord))
  FROM unnest($2::int[], $3::uuid[], $4::jsonb[]) WITH ORDINALITY AS e(dep, up, flows, ord)
 CROSS JOIN LATERAL (SELECT u.status FROM resources u WHERE u.id = e.up AND u.status IS NOT NULL OFFSET 0) u
 GROUP BY e.dep`, pgpool.Reserve(specs, deps, ups, flows)...)
	if err != nil {
		return wrap(err, "compose: bootstrap value flows")
	}
	defer rows.Close()
	for rows.Next() {
		var p int32
		var spec json.RawMessage
		if err := rows.Scan(&p, &spec); err != nil {
			return wrap(err, "compose: bootstrap value flows")
		}
		plan.children[child[p]].spec = spec
	}
	return wrap(rows.Err(), "compose: bootstrap value flows")
}
