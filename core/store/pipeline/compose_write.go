package pipeline

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/db/pgpool"
)

// writeCompose writes the delta of a validated plan: children, prune,
// edges, configs, composed_gen, then schedules and records the event.
func (s *Store) writeCompose(ctx context.Context, tx pgx.Tx, st *composeState, plan *composePlan, gen int64, res *ComposeResult) error {
	now := s.now()
	created, updated, err := writeChildren(ctx, tx, st, plan, now, res)
	if err != nil {
		return err
	}
	freedByPrune, err := pruneChildren(ctx, tx, st, plan, now, res)
	if err != nil {
		return err
	}
	freedByEdges, err := writeEdges(ctx, tx, plan, res)
	if err != nil {
		return err
	}
	if err := writeConfigs(ctx, tx, st, plan, now, res); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
UPDATE resources SET composed_gen = $2, updated_at = coalesce($3::timestamptz, now())
 WHERE id = $1 AND composed_gen < $2`, st.root, gen, now); err != nil {
		return wrap(err, "compose %s: set composed_gen", st.root)
	}
	if gate := gateCandidates(plan, created, updated, freedByPrune, freedByEdges); len(gate) > 0 {
		if err := tx.QueryRow(ctx, `SELECT schedule_eligible($1::uuid[], coalesce($2::timestamptz, now()))`,
			pgpool.Array[uuid.UUID](gate), now).Scan(&res.Scheduled); err != nil {
			return wrap(err, "compose %s: schedule children", st.root)
		}
	}
	if res.Changed() {
		msg := fmt.Sprintf("generation %d: %d created, %d updated (%d re-adopted), %d orphaned, %d deleted, %d torn down, %d edge and %d config changes",
			gen, res.Created, res.Updated, res.Readopted, res.Orphaned, res.Deleted, res.Teardown, res.Edges, res.Configs)
		if _, err := tx.Exec(ctx, `
INSERT INTO resource_events (resource_id, type, reason, message, created_at)
VALUES ($1, 'Normal', 'Composed', $2, coalesce($3::timestamptz, now()))`, st.root, msg, now); err != nil {
			return wrap(err, "compose %s: record event", st.root)
		}
	}
	return nil
}

// gateCandidates is what the compose sends through the gate: the children
// it wrote (created, updated), less each new child that depends on another
// child this same compose created, and the dependents that lost an edge
// (freed: the edge dropped, or its upstream hard-deleted), whose gate may
// have opened with nothing else to send them through it before the reaper's
// lagging walk. A new child whose upstream this compose created was
// inserted with synced_gen 0 < generation, so the gate would only find the
// dependent blocked (a probe of its edges and upstreams per child, in a
// composition mostly made of dependents); the cascade schedules it when
// that upstream syncs, exactly as it would have after a blocked gate.
func gateCandidates(plan *composePlan, created, updated []uuid.UUID, freed ...[]uuid.UUID) []uuid.UUID {
	fresh := make(map[uuid.UUID]bool, len(created))
	for _, id := range created {
		fresh[id] = true
	}
	waits := make(map[uuid.UUID]bool)
	for _, e := range plan.edges {
		if fresh[e.dep] && fresh[e.up] {
			waits[e.dep] = true
		}
	}
	out := make([]uuid.UUID, 0, len(created)+len(updated))
	for _, id := range created {
		if !waits[id] {
			out = append(out, id)
		}
	}
	out = append(out, updated...)
	if len(freed) == 0 {
		return out
	}
	in := make(map[uuid.UUID]bool, len(out))
	for _, id := range out {
		in[id] = true
	}
	for _, ids := range freed {
		for _, id := range ids {
			if !in[id] {
				in[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}

// composeChunk is the most children one statement of writeChildren writes.
// A composition is written in statements of this many rows, in its one
// transaction: the statement's encoded parameters and bind message are what
// converge holds while it runs (a 1,000-child composition in one statement
// was a third of converge's live heap at its peaks in a 1M run, with two
// composes in flight beside the leaves' traffic), and four statements cost
// the database a few plans and statement-trigger runs more per composition.
const composeChunk = 250

// writeChildren inserts the new children and updates the changed and
// re-adopted ones, composeChunk at a time; it returns the ids of each. The
// first chunk with a taken name ends it (writeChildChunk): the caller rolls
// the transaction back, so nothing is written, and the chunks after it are
// not sent.
func writeChildren(ctx context.Context, tx pgx.Tx, st *composeState, plan *composePlan, now any, res *ComposeResult) (created, updated []uuid.UUID, err error) {
	for _, ch := range plan.children {
		if ch.readopt {
			res.Readopted++
		}
	}
	for lo := 0; lo < len(plan.children); lo += composeChunk {
		c, u, err := writeChildChunk(ctx, tx, st, plan.children[lo:min(lo+composeChunk, len(plan.children))], now)
		if err != nil {
			return nil, nil, err
		}
		created, updated = append(created, c...), append(updated, u...)
	}
	res.Created, res.Updated = len(created), len(updated)
	return created, updated, nil
}

// writeChildChunk writes one chunk of children in one statement. A new
// child the insert skipped has a name another owner holds: it is refused
// (takenChild).
func writeChildChunk(ctx context.Context, tx pgx.Tx, st *composeState, children []plannedChild, now any) (created, updated []uuid.UUID, err error) {
	n := len(children)
	ids, kinds, versions, names := make(pgpool.Array[uuid.UUID], n), make(pgpool.Array[string], n), make(pgpool.Array[string], n), make(pgpool.Array[string], n)
	labels, specs, refs, isNew := make(pgpool.Array[json.RawMessage], n), make(pgpool.Array[json.RawMessage], n), make(pgpool.Array[*string], n), make(pgpool.Array[bool], n)
	nNew := 0
	for i := range children {
		ch := &children[i]
		ids[i], kinds[i], versions[i], names[i] = ch.id, ch.Kind, ch.Version, ch.Name
		labels[i], specs[i], isNew[i] = ch.labels, ch.spec, ch.isNew
		if ch.isNew {
			nNew++
		}
		if ch.ProviderConfigRef != "" {
			refs[i] = &ch.ProviderConfigRef
		}
	}
	err = tx.QueryRow(ctx, `
WITH want AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::jsonb[], $7::text[], $8::bool[])
        AS w(id, kind, version, name, labels, spec, ref, is_new)
), ins AS (
    INSERT INTO resources (id, kind, version, name, labels, spec, owner_id, root_id, shard_id, provider_config_ref,
                           created_at, updated_at)
    SELECT w.id, w.kind, w.version, w.name, w.labels, w.spec, $9, $10, shard_of(w.id), w.ref,
           coalesce($11::timestamptz, now()), coalesce($11::timestamptz, now())
      FROM want w WHERE w.is_new
    -- The unique constraint is the ownership check for new children: a
    -- (kind, name) another owner holds is skipped here and refused below,
    -- with no per-child probe whose plan could drift at scale.
    ON CONFLICT (kind, name) DO NOTHING
    RETURNING id
), upd AS (
    -- "r.id = ANY (ARRAY[w.id])": an equality the planner can neither merge
    -- nor hash on, so (seq scans off) the only plan is the loop over the
    -- children probing the primary key. As "r.id = w.id", a resources table
    -- analyzed while empty (a fleet torn down, another applied) looked empty
    -- however much it held, and the update hashed its whole primary key,
    -- walked in order.
    UPDATE resources r
       SET version             = w.version,
           -- a version change is a live migration: a new generation, so a
           -- worker of the new version reconciles it (a spec change bumps
           -- it too, in the trigger, to the same value)
           generation          = CASE WHEN r.version <> w.version THEN r.generation + 1 ELSE r.generation END,
           labels              = w.labels,
           spec                = w.spec,
           provider_config_ref = w.ref,
           frozen_until        = CASE WHEN r.frozen_until = 'infinity' THEN r.frozen_until END,
           updated_at          = coalesce($11::timestamptz, now())
      FROM want w
     WHERE NOT w.is_new AND r.id = ANY (ARRAY[w.id])
       AND ((r.version, r.labels, r.spec, r.provider_config_ref) IS DISTINCT FROM (w.version, w.labels, w.spec, w.ref)
            OR r.frozen_until <> 'infinity')
    RETURNING r.id
)
SELECT coalesce((SELECT array_agg(id) FROM ins), '{}'), coalesce((SELECT array_agg(id) FROM upd), '{}')`,
		pgpool.Reserve(ids, kinds, versions, names, labels, specs, refs, isNew, st.root, st.top, now)...).Scan(&created, &updated)
	if err != nil {
		return nil, nil, wrap(err, "compose %s: write children", st.root)
	}
	if len(created) < nNew {
		return nil, nil, takenChild(children, created)
	}
	return created, updated, nil
}

// pruneChildren handles the owned children the composition no longer
// emits (known from the locked read: no scan of the root's children here):
// orphan grace for kinds that have it, request_resource_deletion for
// finalizer kinds and composites (their Deleters run, in order), a hard
// delete otherwise. Quarantined and already-deleting children are left
// alone; an orphan keeps its original deadline. It returns the dependents
// of the hard-deleted children, whose edges to them went with them.
func pruneChildren(ctx context.Context, tx pgx.Tx, st *composeState, plan *composePlan, now any, res *ComposeResult) ([]uuid.UUID, error) {
	keep := make(map[uuid.UUID]bool, len(plan.keep))
	for _, id := range plan.keep {
		keep[id] = true
	}
	var vanished []uuid.UUID
	for _, o := range st.owned {
		if !keep[o.id] && !o.quarantined && !o.deleting {
			vanished = append(vanished, o.id)
		}
	}
	if len(vanished) == 0 {
		return nil, nil
	}
	var teardown, freed []uuid.UUID
	err := tx.QueryRow(ctx, `
WITH gone AS (
    SELECT r.id, coalesce(kc.orphan_grace_secs, 0) AS grace,
           coalesce(kc.finalizer_name, '') <> '' OR EXISTS (SELECT 1 FROM resources c WHERE c.owner_id = r.id) AS soft
      FROM unnest($1::uuid[]) AS v(id)
     CROSS JOIN LATERAL (SELECT r.id, r.kind, r.version FROM resources r WHERE r.id = v.id OFFSET 0) r
      LEFT JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
), orphan AS (
    UPDATE resources r
       SET frozen_until = coalesce($2::timestamptz, now()) + make_interval(secs => g.grace),
           updated_at   = coalesce($2::timestamptz, now())
      FROM gone g
     WHERE r.id = g.id AND g.grace > 0 AND r.frozen_until IS NULL
    RETURNING r.id
), hard AS (
    DELETE FROM resources r USING gone g
     WHERE r.id = g.id AND g.grace = 0 AND NOT g.soft
    RETURNING r.id
), freed AS (
    -- read in the statement's snapshot: the edges the delete's cascade removes
    SELECT d.dependent_id
      FROM hard h
     CROSS JOIN LATERAL (SELECT d.dependent_id FROM resource_deps d WHERE d.dependency_id = h.id OFFSET 0) d
)
SELECT (SELECT count(*) FROM orphan), (SELECT count(*) FROM hard),
       coalesce((SELECT array_agg(id) FROM gone WHERE grace = 0 AND soft), '{}'),
       coalesce((SELECT array_agg(DISTINCT dependent_id) FROM freed), '{}')`,
		vanished, now).Scan(&res.Orphaned, &res.Deleted, &teardown, &freed)
	if err != nil {
		return nil, wrap(err, "compose %s: prune children", st.root)
	}
	if len(teardown) > 0 {
		if _, err := tx.Exec(ctx, `SELECT request_resource_deletion(id, coalesce($2::timestamptz, now())) FROM unnest($1::uuid[]) AS id`,
			teardown, now); err != nil {
			return nil, wrap(err, "compose %s: tear down pruned children", st.root)
		}
		res.Teardown = len(teardown)
	}
	return freed, nil
}

// writeEdges makes the edges of the emitted children exactly the desired
// ones: upsert (value flows changed) and delete the rest. It returns the
// children that lost an edge.
func writeEdges(ctx context.Context, tx pgx.Tx, plan *composePlan, res *ComposeResult) ([]uuid.UUID, error) {
	if len(plan.children) == 0 {
		return nil, nil
	}
	children := make(pgpool.Array[uuid.UUID], len(plan.children))
	for i, ch := range plan.children {
		children[i] = ch.id
	}
	var freed []uuid.UUID
	deps, ups, flows := make(pgpool.Array[uuid.UUID], len(plan.edges)), make(pgpool.Array[uuid.UUID], len(plan.edges)), make(pgpool.Array[json.RawMessage], len(plan.edges))
	for i, e := range plan.edges {
		deps[i], ups[i], flows[i] = e.dep, e.up, e.flows
	}
	err := tx.QueryRow(ctx, `
WITH want AS (
    SELECT * FROM unnest($2::uuid[], $3::uuid[], $4::jsonb[]) AS e(dep, up, flows)
), del AS (
    -- The children's edges are found by one primary-key probe per child
    -- (LATERAL … OFFSET 0) and deleted by TID: dependent_id = ANY of a
    -- composition's worth of ids, without statistics (after a bulk load),
    -- is estimated at most of the table and planned as a Seq Scan.
    DELETE FROM resource_deps d
     WHERE d.ctid = ANY (ARRAY(
           SELECT x.ctid
             FROM unnest($1::uuid[]) AS c(id)
            CROSS JOIN LATERAL (SELECT x.ctid, x.dependent_id, x.dependency_id FROM resource_deps x
                                 WHERE x.dependent_id = c.id OFFSET 0) x
            WHERE NOT EXISTS (SELECT 1 FROM want w WHERE w.dep = x.dependent_id AND w.up = x.dependency_id)))
    RETURNING d.dependent_id
), ups AS (
    INSERT INTO resource_deps AS d (dependent_id, dependency_id, value_flows)
    SELECT dep, up, flows FROM want
    ON CONFLICT (dependent_id, dependency_id) DO UPDATE SET value_flows = EXCLUDED.value_flows
     WHERE d.value_flows IS DISTINCT FROM EXCLUDED.value_flows
    RETURNING 1
)
SELECT (SELECT count(*) FROM del) + (SELECT count(*) FROM ups),
       coalesce((SELECT array_agg(DISTINCT dependent_id) FROM del), '{}')`, pgpool.Reserve(children, deps, ups, flows)...).Scan(&res.Edges, &freed)
	return freed, wrap(err, "compose: write edges")
}

// writeConfigs makes the root's owned configs the desired ones: it upserts
// the emitted ones (one kept after an earlier prune is the composition's
// again) and deletes the rest. A config that resources still name survives
// its delete (the providerconfigs_keep_named trigger: kept, still the
// root's, with a Warning on the root), so the count is of the configs
// written and deleted; once none names it, the reaper deletes it
// (sweep_pruned_configs), or a later compose does.
func writeConfigs(ctx context.Context, tx pgx.Tx, st *composeState, plan *composePlan, now any, res *ComposeResult) error {
	n := len(plan.configs)
	kinds, names, defaults := make([]string, n), make([]string, n), make([]bool, n)
	specs, data := make([]json.RawMessage, n), make([]json.RawMessage, n)
	for i, c := range plan.configs {
		kinds[i], names[i], defaults[i], data[i] = c.Kind, c.Name, c.IsDefault, c.Data
		specs[i] = c.Spec
		if len(specs[i]) == 0 {
			specs[i] = json.RawMessage(`{}`)
		}
	}
	err := tx.QueryRow(ctx, `
WITH want AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::bool[], $5::jsonb[], $6::jsonb[]) AS c(kind, name, is_default, spec, data)
), del AS (
    DELETE FROM providerconfigs p
     WHERE p.owner_id = $1
       AND NOT EXISTS (SELECT 1 FROM want w WHERE w.kind = p.kind AND w.name = p.name)
    RETURNING 1
), ups AS (
    INSERT INTO providerconfigs AS p (kind, name, is_default, spec, data, owner_id, created_at, updated_at)
    SELECT kind, name, is_default, spec, data, $1, coalesce($7::timestamptz, now()), coalesce($7::timestamptz, now())
      FROM want
    ON CONFLICT (kind, name) DO UPDATE
       SET is_default = EXCLUDED.is_default, spec = EXCLUDED.spec, data = EXCLUDED.data, pruned_at = NULL,
           updated_at = EXCLUDED.updated_at
     WHERE p.owner_id = $1
       AND ((p.is_default, p.spec, p.data) IS DISTINCT FROM (EXCLUDED.is_default, EXCLUDED.spec, EXCLUDED.data)
            OR p.pruned_at IS NOT NULL)
    RETURNING 1
)
SELECT (SELECT count(*) FROM del) + (SELECT count(*) FROM ups)`, st.root, kinds, names, defaults, specs, data, now).Scan(&res.Configs)
	return wrap(err, "compose %s: write configs", st.root)
}
