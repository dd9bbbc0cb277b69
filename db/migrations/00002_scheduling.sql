-- 00002_scheduling: the scheduling core. The gate (schedule_eligible), the
-- reactive cascade (cascade_on_ready_change + the lifecycle emits), the
-- drainer (drain_outbox_batch, drain_rollup_rechecks) and operator verbs
-- (enqueue_operation). The claim, heartbeat, release, outbox append and
-- compose application are Go SQL in core/store/pipeline.

-- +goose Up

-- ---------------------------------------------------------------------------
-- xmax_in_flight: could the transaction stamped in a row version's xmax be
-- invisible to the current snapshot — still running, or committed after the
-- snapshot was taken? That is the "another drain is settling this row right
-- now" signal the rollup straddle probe needs. It reads the header, takes no
-- lock and writes nothing.
--   * 0 (never updated or locked) and the frozen xids → false.
--   * our own transaction (we hold the lock) → false.
--   * an xid at or past the snapshot's xmax, or in its in-progress list → true.
--   * an xid that completed before the snapshot (a stale row lock, an aborted
--     updater) → false.
-- A MultiXactId in xmax (several lockers) is read as a plain xid and may be
-- misjudged either way; rollup_straddle_possible covers that with its small
-- remainder rule.
-- +goose StatementBegin
CREATE FUNCTION xmax_in_flight(p_xmax xid) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_raw  bigint := p_xmax::text::bigint;
    v_snap pg_snapshot;
    v_top  bigint;
    v_diff bigint;
    v_full bigint;
BEGIN
    IF v_raw < 3 THEN
        RETURN false;
    END IF;
    v_snap := pg_current_snapshot();
    v_top := pg_snapshot_xmax(v_snap)::text::bigint;
    -- Widen the 32-bit xid to the 64-bit one nearest the snapshot's xmax.
    v_diff := v_raw - (v_top & 4294967295);
    IF v_diff >= 2147483648 THEN
        v_diff := v_diff - 4294967296;
    ELSIF v_diff < -2147483648 THEN
        v_diff := v_diff + 4294967296;
    END IF;
    v_full := v_top + v_diff;
    IF v_full = coalesce(pg_current_xact_id_if_assigned()::text::bigint, -1) THEN
        RETURN false;
    END IF;
    IF v_diff >= 0 THEN
        RETURN true;
    END IF;
    RETURN NOT pg_visible_in_snapshot(v_full::text::xid8, v_snap);
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- rollup_descendants_settled: the rollup gate. A composite root's rollup may
-- run once every LIVE descendant is settled: synced (synced_gen >= generation)
-- or failed for its live spec. Frozen (orphaned, quarantined) and deleting
-- descendants are excluded, so they never hold a rollup back. A top root
-- (root_id IS NULL) is one indexed NOT EXISTS probe of idx_resources_unsettled
-- (its predicate is exactly the "unsettled" test below); a nested composite
-- walks its owner subtree, lazily, so the walk stops at the first unsettled row.
-- +goose StatementBegin
CREATE FUNCTION rollup_descendants_settled(p_root uuid, p_top boolean) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN p_top THEN NOT EXISTS (
                    SELECT 1 FROM resources d
                     WHERE d.root_id = p_root
                       AND d.synced_gen < d.generation AND d.failure_gen <> d.generation
                       AND d.frozen_until IS NULL AND d.deletion_requested_at IS NULL)
           ELSE NOT EXISTS (
                    WITH RECURSIVE sub AS (
                        SELECT c.id, c.synced_gen, c.generation, c.failure_gen, c.frozen_until, c.deletion_requested_at
                          FROM resources c WHERE c.owner_id = p_root
                        UNION ALL
                        SELECT c.id, c.synced_gen, c.generation, c.failure_gen, c.frozen_until, c.deletion_requested_at
                          FROM resources c JOIN sub s ON c.owner_id = s.id)
                    SELECT 1 FROM sub d
                     WHERE d.synced_gen < d.generation AND d.failure_gen <> d.generation
                       AND d.frozen_until IS NULL AND d.deletion_requested_at IS NULL)
           END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- rollup_straddle_possible: called for a rollup root whose descendant gate
-- just failed. When a root's last unsettled descendants are settled by two
-- concurrent drain transactions, neither snapshot sees "all settled" and
-- neither pends the root. A straddle is only possible when every descendant
-- this snapshot still sees as unsettled is being (or has just been) written by
-- a transaction this snapshot cannot see — its xmax is in flight. So:
--   * one idle unsettled descendant (xmax not in flight) → no straddle: that
--     descendant's own settle will cascade to the root later. The probe stops
--     at the first idle row, so on a root mid-progress it costs an index probe
--     or two — this is what keeps the healthy 1M path cheap;
--   * otherwise, or when at most p_few unsettled remain (the cascade passes 4:
--     it also covers a MultiXactId xmax the in-flight test cannot read) →
--     a straddle is possible.
-- +goose StatementBegin
CREATE FUNCTION rollup_straddle_possible(p_root uuid, p_top boolean, p_few int) RETURNS boolean
LANGUAGE sql VOLATILE AS $$
    SELECT CASE WHEN p_top THEN
                (p_few > 0 AND (SELECT count(*) FROM (
                    SELECT 1 FROM resources d
                     WHERE d.root_id = p_root
                       AND d.synced_gen < d.generation AND d.failure_gen <> d.generation
                       AND d.frozen_until IS NULL AND d.deletion_requested_at IS NULL
                     LIMIT p_few + 1) x) <= p_few)
                OR NOT EXISTS (
                    SELECT 1 FROM resources d
                     WHERE d.root_id = p_root
                       AND d.synced_gen < d.generation AND d.failure_gen <> d.generation
                       AND d.frozen_until IS NULL AND d.deletion_requested_at IS NULL
                       AND NOT xmax_in_flight(d.xmax))
           ELSE (
                WITH RECURSIVE sub AS (
                    SELECT c.id, c.xmax AS x, c.synced_gen, c.generation, c.failure_gen, c.frozen_until, c.deletion_requested_at
                      FROM resources c WHERE c.owner_id = p_root
                    UNION ALL
                    SELECT c.id, c.xmax, c.synced_gen, c.generation, c.failure_gen, c.frozen_until, c.deletion_requested_at
                      FROM resources c JOIN sub s ON c.owner_id = s.id),
                unsettled AS (
                    SELECT d.x FROM sub d
                     WHERE d.synced_gen < d.generation AND d.failure_gen <> d.generation
                       AND d.frozen_until IS NULL AND d.deletion_requested_at IS NULL)
                SELECT (p_few > 0 AND (SELECT count(*) FROM (SELECT 1 FROM unsettled LIMIT p_few + 1) x) <= p_few)
                    OR NOT EXISTS (SELECT 1 FROM unsettled u WHERE NOT xmax_in_flight(u.x)))
           END
$$;
-- +goose StatementEnd

-- descendant_ids: the owner subtree of a composite (nested rollup roots).
-- +goose StatementBegin
CREATE FUNCTION descendant_ids(p_root uuid) RETURNS SETOF uuid
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE sub AS (
        SELECT c.id FROM resources c WHERE c.owner_id = p_root
        UNION ALL
        SELECT c.id FROM resources c JOIN sub s ON c.owner_id = s.id)
    SELECT id FROM sub
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- schedule_candidates: the body of the gate, shared by schedule_eligible
-- (p_repend = false) and the cascade / recheck (p_repend = true).
--
-- A candidate gets a `reconcile` work_queue row when
--   * it needs reconciling: generation > synced_gen — or, with p_repend, it is
--     a composed rollup root whose descendants changed (a re-pend with trigger
--     childrenSettled, so a composite demotes and recovers reactively);
--   * it is live: not deleting, not frozen (orphaned or quarantined);
--   * it is not terminally failed for its live spec;
--   * every upstream (resource_deps) has caught up: synced_gen >= generation;
--   * a rollup root whose compose is done (composed_gen >= generation, or a
--     kind with no composer) has every live descendant settled
--     (rollup_descendants_settled).
-- The attached providerconfig (provider_config_ref) is snapshotted into the
-- row: spec → provider_config, data → provider_bundle.
-- ON CONFLICT is gen-gated: only an unleased row is touched, and only to raise
-- its generation (which also resets its backoff), so re-running is idempotent
-- and never disturbs a running task. A rollup root that failed only the
-- descendant gate is armed in rollup_recheck when a straddle is possible.
-- Wakes: notify_gated('work_ready') when a row was written, a direct
-- pg_notify('rollup_recheck') when a root was armed.
-- +goose StatementBegin
CREATE FUNCTION schedule_candidates(p_ids uuid[], p_now timestamptz, p_repend boolean) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n     int;
    v_armed int;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH cand AS MATERIALIZED (
        SELECT r.id, r.shard_id, r.kind, r.version, r.generation, r.root_id,
               pc.spec AS pc_spec, pc.data AS pc_data, g.rollup_gated,
               CASE WHEN NOT g.rollup_gated THEN true
                    ELSE rollup_descendants_settled(r.id, r.root_id IS NULL) END AS settled
          FROM resources r
          LEFT JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
          LEFT JOIN providerconfigs pc ON pc.kind = r.kind AND pc.name = r.provider_config_ref
          CROSS JOIN LATERAL (
              SELECT coalesce(kc.has_rollup, false)
                     AND NOT (coalesce(kc.has_composer, false) AND r.composed_gen < r.generation) AS rollup_gated
          ) g
         WHERE r.id = ANY (p_ids)
           AND (r.synced_gen < r.generation OR (p_repend AND g.rollup_gated))
           AND r.deletion_requested_at IS NULL
           AND r.frozen_until IS NULL
           AND NOT (r.failure_terminal AND r.failure_gen = r.generation)
           AND NOT EXISTS (
                   SELECT 1 FROM resource_deps d JOIN resources u ON u.id = d.dependency_id
                    WHERE d.dependent_id = r.id AND u.synced_gen < u.generation)
    ), ins AS (
        INSERT INTO work_queue AS w (resource_id, task_type, shard_id, kind, version, generation, trigger,
                                     provider_config, provider_bundle, not_before, created_at)
        SELECT c.id, 'reconcile', c.shard_id, c.kind, c.version, c.generation,
               CASE WHEN c.rollup_gated THEN 'childrenSettled' ELSE 'specChange' END,
               c.pc_spec, c.pc_data, p_now, p_now
          FROM cand c
         WHERE c.settled
        ON CONFLICT (shard_id, resource_id, task_type, op_id) DO UPDATE
           SET generation      = EXCLUDED.generation,
               trigger         = EXCLUDED.trigger,
               provider_config = EXCLUDED.provider_config,
               provider_bundle = EXCLUDED.provider_bundle,
               attempts        = 0,
               not_before      = EXCLUDED.not_before
         WHERE w.worker_id IS NULL AND w.generation < EXCLUDED.generation
        RETURNING 1
    ), arm AS (
        INSERT INTO rollup_recheck AS rr (root_id, shard_id, armed_at)
        SELECT c.id, c.shard_id, p_now
          FROM cand c
         WHERE NOT c.settled AND rollup_straddle_possible(c.id, c.root_id IS NULL, 4)
        ON CONFLICT (root_id) DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM ins), (SELECT count(*) FROM arm) INTO v_n, v_armed;
    IF v_n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    IF v_armed > 0 THEN
        PERFORM pg_notify('rollup_recheck', '');
    END IF;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- schedule_eligible: the gate every writer calls after creating a resource or
-- changing its spec (and the cascade after an upstream syncs). See
-- schedule_candidates for the conditions. Returns the number of work_queue
-- rows inserted or raised to a newer generation.
-- +goose StatementBegin
CREATE FUNCTION schedule_eligible(p_ids uuid[], p_now timestamptz DEFAULT now()) RETURNS int
LANGUAGE sql AS $$
    SELECT schedule_candidates(p_ids, p_now, false)
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- Value flows: JSON-pointer helpers. A flow {"src_field": "/vpc_id",
-- "dep_field": "/vpc_id"} copies the upstream's status value at src_field
-- into the dependent's spec at dep_field. Used by the drainer (an upstream's
-- status changed) and by the compose application (bootstrap from upstreams
-- that already have status).

-- json_pointer_path: an RFC 6901 pointer as a jsonb path ('/a/b~1c' → {a,b/c}).
-- +goose StatementBegin
CREATE FUNCTION json_pointer_path(p_pointer text) RETURNS text[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN p_pointer IN ('', '/') THEN '{}'::text[]
                ELSE ARRAY(SELECT replace(replace(t, '~1', '/'), '~0', '~')
                             FROM unnest(string_to_array(ltrim(p_pointer, '/'), '/')) WITH ORDINALITY AS x(t, i)
                            ORDER BY i)
           END
$$;
-- +goose StatementEnd

-- jsonb_set_pairs: apply [[dep_field, value], …] to a spec in order, creating
-- missing intermediate objects. A pair whose path runs through a scalar or
-- indexes an array with a non-number is skipped rather than raised: a bad flow
-- must never wedge a drain batch.
-- +goose StatementBegin
CREATE FUNCTION jsonb_set_pairs(p_doc jsonb, p_pairs jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v_pair jsonb;
    v_path text[];
    v_node jsonb;
    v_ok   boolean;
    i      int;
BEGIN
    IF p_pairs IS NULL OR jsonb_typeof(p_pairs) <> 'array' THEN
        RETURN p_doc;
    END IF;
    FOR v_pair IN SELECT value FROM jsonb_array_elements(p_pairs) LOOP
        CONTINUE WHEN v_pair->1 IS NULL OR v_pair->>0 IS NULL;
        v_path := json_pointer_path(v_pair->>0);
        CONTINUE WHEN cardinality(v_path) = 0;
        IF p_doc IS NULL OR jsonb_typeof(p_doc) NOT IN ('object', 'array') THEN
            p_doc := '{}';
        END IF;
        v_ok := true;
        FOR i IN 1 .. cardinality(v_path) LOOP
            v_node := CASE WHEN i = 1 THEN p_doc ELSE p_doc #> v_path[1:i - 1] END;
            IF jsonb_typeof(v_node) = 'array' AND v_path[i] !~ '^-?[0-9]+$' THEN
                v_ok := false;
                EXIT;
            END IF;
            IF i < cardinality(v_path) AND jsonb_typeof(p_doc #> v_path[1:i]) IS DISTINCT FROM 'object'
               AND jsonb_typeof(p_doc #> v_path[1:i]) IS DISTINCT FROM 'array' THEN
                IF (p_doc #> v_path[1:i]) IS NOT NULL THEN
                    v_ok := false;   -- a scalar in the way: leave the spec alone
                    EXIT;
                END IF;
                p_doc := jsonb_set(p_doc, v_path[1:i], '{}', true);
            END IF;
        END LOOP;
        CONTINUE WHEN NOT v_ok;
        p_doc := jsonb_set(p_doc, v_path, v_pair->1, true);
    END LOOP;
    RETURN p_doc;
END
$$;
-- +goose StatementEnd

-- value_flow_pairs: the [[dep_field, value], …] pairs of flows whose
-- src_field is present in the upstream status.
-- +goose StatementBegin
CREATE FUNCTION value_flow_pairs(p_flows jsonb, p_status jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_array(f->>'dep_field', p_status #> json_pointer_path(f->>'src_field'))), '[]')
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(p_flows) = 'array' THEN p_flows ELSE '[]' END) f
     WHERE p_status IS NOT NULL AND f->>'src_field' IS NOT NULL AND f->>'dep_field' IS NOT NULL
       AND p_status #> json_pointer_path(f->>'src_field') IS NOT NULL
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- cascade_on_ready_change: reactive scheduling, demotion and lifecycle emit.
-- AFTER UPDATE … FOR EACH STATEMENT on resources, with transition tables, so
-- a drain batch of a thousand rows runs it once.
--   * rows that newly reach synced_gen >= generation schedule their direct
--     edge-dependents (schedule_eligible: each waits on every upstream);
--   * a row whose settledness or health moved — newly synced, newly failed,
--     left the unsettled set (frozen, deleting), health flipped either way, or
--     recovered from a failure — re-evaluates the rollup-having owner and top
--     root it belongs to: a lagging root pends when its gate clears, a synced
--     one is re-pended with trigger childrenSettled so the composite demotes
--     (Degraded) and recovers reactively. Roots whose gate may have been
--     straddled by a concurrent drain are armed in rollup_recheck there (see
--     rollup_straddle_possible);
--   * lifecycle_outbox rows for synced / degraded / failed, one per matching
--     enabled binding, each behind an EXISTS short-circuit on the partial
--     idx_reactor_bindings_transition, so with no binding it is one probe and
--     no join; a direct pg_notify('lifecycle_ready') when rows were written.
-- +goose StatementBegin
CREATE FUNCTION cascade_on_ready_change() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_deps  uuid[];
    v_roots uuid[];
    v_k     int;
    v_life  int := 0;
BEGIN
    WITH ch AS MATERIALIZED (
        SELECT n.id, n.owner_id, n.root_id,
               n.synced_gen >= n.generation AND n.synced_gen > o.synced_gen AS newly_synced,
               (n.synced_gen >= n.generation AND n.synced_gen > o.synced_gen)
               OR ((o.synced_gen < o.generation AND o.failure_gen <> o.generation
                    AND o.frozen_until IS NULL AND o.deletion_requested_at IS NULL)
                   AND NOT (n.synced_gen < n.generation AND n.failure_gen <> n.generation
                            AND n.frozen_until IS NULL AND n.deletion_requested_at IS NULL))
               OR o.health_ok <> n.health_ok
               OR (o.failure_gen = o.generation) <> (n.failure_gen = n.generation) AS rollup_event
          FROM new_rows n JOIN old_rows o ON o.id = n.id
    ), hit AS MATERIALIZED (
        SELECT * FROM ch WHERE ch.rollup_event
    )
    SELECT (SELECT array_agg(DISTINCT d.dependent_id)
              FROM hit JOIN resource_deps d ON d.dependency_id = hit.id
             WHERE hit.newly_synced),
           (SELECT array_agg(DISTINCT r.id)
              FROM (SELECT hit.owner_id AS id FROM hit WHERE hit.owner_id IS NOT NULL
                    UNION
                    SELECT hit.root_id FROM hit WHERE hit.root_id IS NOT NULL) x
              JOIN resources r ON r.id = x.id
              JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
             WHERE kc.has_rollup)
      INTO v_deps, v_roots;
    IF v_deps IS NOT NULL THEN
        PERFORM schedule_candidates(v_deps, now(), false);
    END IF;
    IF v_roots IS NOT NULL THEN
        PERFORM schedule_candidates(v_roots, now(), true);
    END IF;

    IF EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'synced') THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT n.id, 'synced', n.generation, b.name, n.shard_id, b.reactor, n.kind, to_jsonb(n)
          FROM new_rows n JOIN old_rows o ON o.id = n.id
          JOIN reactor_bindings b ON b.enabled AND b.transition = 'synced' AND b.watch_kind = n.kind
                                 AND n.labels @> b.label_match
         WHERE n.synced_gen >= n.generation AND n.synced_gen > o.synced_gen
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_k = ROW_COUNT;
        v_life := v_life + v_k;
    END IF;
    IF EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'degraded') THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT n.id, 'degraded', n.generation, b.name, n.shard_id, b.reactor, n.kind, to_jsonb(n)
          FROM new_rows n JOIN old_rows o ON o.id = n.id
          JOIN reactor_bindings b ON b.enabled AND b.transition = 'degraded' AND b.watch_kind = n.kind
                                 AND n.labels @> b.label_match
         WHERE n.phase = 'Degraded' AND o.phase <> 'Degraded'
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_k = ROW_COUNT;
        v_life := v_life + v_k;
    END IF;
    IF EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'failed') THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT n.id, 'failed', n.generation, b.name, n.shard_id, b.reactor, n.kind, to_jsonb(n)
          FROM new_rows n JOIN old_rows o ON o.id = n.id
          JOIN reactor_bindings b ON b.enabled AND b.transition = 'failed' AND b.watch_kind = n.kind
                                 AND n.labels @> b.label_match
         WHERE n.failure_gen = n.generation AND o.failure_gen <> n.failure_gen
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_k = ROW_COUNT;
        v_life := v_life + v_k;
    END IF;
    IF v_life > 0 THEN
        PERFORM pg_notify('lifecycle_ready', '');
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER cascade_on_ready_change AFTER UPDATE ON resources
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION cascade_on_ready_change();

-- emit_lifecycle_created: lifecycle_outbox 'created' rows for inserted
-- resources with a matching enabled binding (behind the EXISTS short-circuit).
-- +goose StatementBegin
CREATE FUNCTION emit_lifecycle_created() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'created') THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT n.id, 'created', n.generation, b.name, n.shard_id, b.reactor, n.kind, to_jsonb(n)
          FROM new_rows n
          JOIN reactor_bindings b ON b.enabled AND b.transition = 'created' AND b.watch_kind = n.kind
                                 AND n.labels @> b.label_match
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            PERFORM pg_notify('lifecycle_ready', '');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER resources_lifecycle_created AFTER INSERT ON resources
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION emit_lifecycle_created();

-- on_resources_deleted: a deleted resource leaves no queue rows behind (work
-- with no resource would be claimed forever) and no recheck; and 'deleted'
-- lifecycle rows, snapshotted from the old row, for matching enabled
-- bindings. Hash joins are off so the queue delete is a PK probe per row,
-- pruned to the row's partition, never a scan of all sixteen.
-- +goose StatementBegin
CREATE FUNCTION on_resources_deleted() RETURNS trigger
LANGUAGE plpgsql SET enable_hashjoin = off SET enable_mergejoin = off AS $$
BEGIN
    DELETE FROM work_queue w USING old_rows o WHERE w.shard_id = o.shard_id AND w.resource_id = o.id;
    DELETE FROM rollup_recheck rr USING old_rows o WHERE rr.root_id = o.id;
    IF EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'deleted') THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT o.id, 'deleted', o.generation, b.name, o.shard_id, b.reactor, o.kind, to_jsonb(o)
          FROM old_rows o
          JOIN reactor_bindings b ON b.enabled AND b.transition = 'deleted' AND b.watch_kind = o.kind
                                 AND o.labels @> b.label_match
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            PERFORM pg_notify('lifecycle_ready', '');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER resources_lifecycle_deleted AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION on_resources_deleted();

-- ---------------------------------------------------------------------------
-- claim_budget: the per-kind concurrency cap's budget for one claim of a
-- CAPPED kind (the claim calls it only when kind_config.max_inflight > 0, so
-- an uncapped kind pays nothing). budget = max_inflight − SUM(kind_inflight
-- partials), read from the tiny partials table, never from work_queue.
-- Capped claims of one kind are serialised on a transaction advisory lock held
-- to the claim's commit, and the SUM is read after the lock in a fresh
-- snapshot (a VOLATILE function's statements take one each), so two claimers
-- can never spend the same budget.
-- +goose StatementBegin
CREATE FUNCTION claim_budget(p_kind text, p_version text, p_max int) RETURNS int
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_cap  int;
    v_used bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('claim_budget'), hashtext(p_kind || '/' || p_version));
    SELECT max_inflight INTO v_cap FROM kind_config WHERE kind = p_kind AND version = p_version;
    IF coalesce(v_cap, 0) = 0 THEN
        RETURN p_max;
    END IF;
    SELECT coalesce(sum(in_flight), 0) INTO v_used FROM kind_inflight WHERE kind = p_kind AND version = p_version;
    RETURN greatest(0, least(p_max::bigint, v_cap - v_used))::int;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- drain_item: one fenced outbox result joined with its finished queue row.
CREATE TYPE drain_item AS (
    resource_id      uuid,
    shard_id         int,
    task_type        text,
    op_id            uuid,
    kind             text,
    version          text,
    generation       bigint,
    trigger          text,
    attempts         int,
    retried          boolean,
    status           jsonb,
    health_ok        boolean,
    advance          boolean,
    conditions       jsonb,
    error_message    text,
    error_terminal   boolean,
    finalizer        text,
    operation_output jsonb
);

-- drain_outbox_batch: the drainer's workhorse. Pops up to p_max work_outbox
-- rows in shard_id BETWEEN p_lo AND p_hi and applies them:
--   1. lock the resources concerned (and the value-flow dependents of changed
--      statuses) ordered by id: concurrent drainers lock in one global order,
--      so they cannot deadlock on resources;
--   2. the fence: a result applies only if its work_queue row still holds the
--      result's claim_epoch; a stale result (released, reaped, re-claimed) is
--      dropped. Several results for one task coalesce to the newest. Finished
--      rows are deleted; a transient reconcile failure for the live spec and a
--      failed delete re-pend the same row with exponential backoff (attempts+1,
--      not_before, lease cleared). Capped kinds give their in-flight back to
--      the drainer's kind_inflight partial (range_lo = p_lo);
--   3. value flows: dependents (not frozen, not deleting) of upstreams whose
--      status changed get the new values in their spec — the generation bump
--      is the existing trigger's — before the upstream update, so the cascade
--      sees them at their new generation;
--   4. one coalesced resources UPDATE with a no-op gate: status, synced_gen
--      (= the task generation when advance_synced_gen), health_ok,
--      failure_gen/failure_terminal (cleared on success, stamped on failure),
--      finalizers (a delete task strips its finalizer; the sweep removes the
--      row). Its AFTER STATEMENT trigger is the cascade;
--   5. resource_conditions on transition only (last_transition_time moves only
--      when status does), stored False Synced/Ready cleared on a clean
--      reconcile; events for failures (first of a generation) and rollup phase
--      changes — never for a plain leaf success; operations finished;
--   6. resources that are still lagging (moved on past the task's generation,
--      a composite deferring its rollup, a terminal failure of an older spec)
--      go back through the gate.
-- Returns the number of outbox rows popped.
-- +goose StatementBegin
CREATE FUNCTION drain_outbox_batch(p_max int, p_lo int, p_hi int, p_now timestamptz DEFAULT now()) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_out     work_outbox[];
    v_n       int;
    v_items   drain_item[];
    v_subst   uuid[];
    v_resched uuid[];
BEGIN
    WITH popped AS (
        DELETE FROM work_outbox o
         WHERE o.shard_id BETWEEN p_lo AND p_hi
           AND (o.shard_id, o.id) IN (
                   SELECT x.shard_id, x.id FROM work_outbox x
                    WHERE x.shard_id BETWEEN p_lo AND p_hi
                    ORDER BY x.shard_id, x.id
                    LIMIT p_max
                      FOR UPDATE SKIP LOCKED)
        RETURNING o
    )
    SELECT array_agg(popped.o), count(*) INTO v_out, v_n FROM popped;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;

    -- 1. lock, in id order
    PERFORM 1 FROM resources r
     WHERE r.id IN (SELECT u.resource_id FROM unnest(v_out) u
                    UNION
                    SELECT d.dependent_id FROM unnest(v_out) u
                      JOIN resource_deps d ON d.dependency_id = u.resource_id AND d.value_flows <> '[]'::jsonb
                     WHERE u.task_type = 'reconcile' AND u.error_message IS NULL AND u.status IS NOT NULL)
     ORDER BY r.id
       FOR NO KEY UPDATE;

    -- 2. fence, finish or re-pend the queue rows, give capped slots back
    WITH o AS (
        SELECT DISTINCT ON (u.shard_id, u.resource_id, u.task_type, u.op_id) u.*
          FROM unnest(v_out) u
         ORDER BY u.shard_id, u.resource_id, u.task_type, u.op_id, u.claim_epoch DESC, u.id DESC
    ), oc AS (
        SELECT o.*, (o.error_message IS NOT NULL
                     AND (o.task_type = 'delete'
                          OR (o.task_type = 'reconcile' AND NOT o.error_terminal
                              AND o.generation >= coalesce(r.generation, 0)))) AS retry
          FROM o LEFT JOIN resources r ON r.id = o.resource_id
    ), fin AS (
        DELETE FROM work_queue w USING oc
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.shard_id = oc.shard_id AND w.resource_id = oc.resource_id
           AND w.task_type = oc.task_type AND w.op_id = oc.op_id
           AND w.claim_epoch = oc.claim_epoch AND NOT oc.retry
        RETURNING w.resource_id, w.shard_id, w.task_type, w.op_id, w.kind, w.version, w.generation, w.trigger,
                  w.attempts, false AS retried, w.worker_id IS NOT NULL AS leased, oc.status, oc.health_ok,
                  oc.advance_synced_gen, oc.conditions, oc.error_message, oc.error_terminal, oc.finalizer,
                  oc.operation_output
    ), rp AS (
        UPDATE work_queue w
           SET attempts     = w.attempts + 1,
               not_before   = p_now + least(interval '5 minutes', interval '1 second' * power(2, least(w.attempts, 16))),
               worker_id    = NULL,
               claim_epoch  = NULL,
               leased_at    = NULL,
               heartbeat_at = NULL
          FROM oc
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.shard_id = oc.shard_id AND w.resource_id = oc.resource_id
           AND w.task_type = oc.task_type AND w.op_id = oc.op_id
           AND w.claim_epoch = oc.claim_epoch AND oc.retry
        RETURNING w.resource_id, w.shard_id, w.task_type, w.op_id, w.kind, w.version, w.generation, w.trigger,
                  w.attempts - 1, true, true, oc.status, oc.health_ok,
                  oc.advance_synced_gen, oc.conditions, oc.error_message, oc.error_terminal, oc.finalizer,
                  oc.operation_output
    ), done AS (
        SELECT * FROM fin UNION ALL SELECT * FROM rp
    ), cap AS (
        INSERT INTO kind_inflight AS k (kind, version, range_lo, in_flight)
        SELECT d.kind, d.version, p_lo, -count(*)
          FROM done d JOIN kind_config kc ON kc.kind = d.kind AND kc.version = d.version
         WHERE kc.max_inflight > 0 AND d.leased
         GROUP BY d.kind, d.version
        ON CONFLICT (kind, version, range_lo) DO UPDATE SET in_flight = k.in_flight + EXCLUDED.in_flight
    )
    SELECT array_agg(ROW(d.resource_id, d.shard_id, d.task_type, d.op_id, d.kind, d.version, d.generation, d.trigger,
                         d.attempts, d.retried, d.status, d.health_ok, d.advance_synced_gen, d.conditions,
                         d.error_message, d.error_terminal, d.finalizer, d.operation_output)::drain_item
                     ORDER BY d.resource_id)
      INTO v_items FROM done d;
    IF v_items IS NULL THEN
        RETURN v_n;
    END IF;

    -- 3. value flows into dependents of changed statuses
    WITH src AS (
        SELECT i.resource_id, i.status
          FROM unnest(v_items) i JOIN resources r ON r.id = i.resource_id
         WHERE i.task_type = 'reconcile' AND i.error_message IS NULL AND i.status IS NOT NULL
           AND i.status IS DISTINCT FROM r.status
    ), pairs AS (
        SELECT d.dependent_id, jsonb_agg(p.pair ORDER BY d.dependency_id, p.ord) AS pairs
          FROM src s
          JOIN resource_deps d ON d.dependency_id = s.resource_id AND d.value_flows <> '[]'::jsonb
          CROSS JOIN LATERAL jsonb_array_elements(value_flow_pairs(d.value_flows, s.status)) WITH ORDINALITY AS p(pair, ord)
         GROUP BY d.dependent_id
    ), subst AS (
        SELECT p.dependent_id AS id, jsonb_set_pairs(r.spec, p.pairs) AS spec
          FROM pairs p JOIN resources r ON r.id = p.dependent_id
         WHERE r.frozen_until IS NULL AND r.deletion_requested_at IS NULL
    ), upd AS (
        UPDATE resources r SET spec = s.spec, updated_at = p_now
          FROM subst s
         WHERE r.id = s.id AND r.spec IS DISTINCT FROM s.spec
        RETURNING r.id
    )
    SELECT array_agg(upd.id) INTO v_subst FROM upd;

    -- 4. the coalesced status update (its AFTER STATEMENT trigger is the cascade)
    WITH rec AS (
        SELECT i.* FROM unnest(v_items) i WHERE i.task_type = 'reconcile'
    ), del AS (
        SELECT i.resource_id, array_agg(i.finalizer) AS fins
          FROM unnest(v_items) i
         WHERE i.task_type = 'delete' AND i.error_message IS NULL
         GROUP BY i.resource_id
    ), per AS (
        SELECT r.id, r.kind, r.version, r.phase AS old_phase, r.generation, r.failure_gen AS old_failure_gen,
               rec.generation AS task_gen, rec.trigger, rec.retried, rec.error_message, rec.attempts,
               rec.resource_id IS NOT NULL AND rec.error_message IS NULL AS ok,
               rec.resource_id IS NOT NULL AND rec.error_message IS NOT NULL AS failed,
               CASE WHEN rec.error_message IS NULL AND rec.resource_id IS NOT NULL
                    THEN coalesce(rec.status, r.status) ELSE r.status END AS n_status,
               CASE WHEN rec.error_message IS NULL AND rec.advance
                    THEN greatest(r.synced_gen, rec.generation) ELSE r.synced_gen END AS n_synced,
               CASE WHEN rec.error_message IS NULL AND rec.resource_id IS NOT NULL
                    THEN coalesce(rec.health_ok, r.health_ok) ELSE r.health_ok END AS n_health,
               CASE WHEN rec.error_message IS NOT NULL THEN rec.generation
                    WHEN rec.advance AND r.failure_gen <= rec.generation THEN 0
                    ELSE r.failure_gen END AS n_failure_gen,
               CASE WHEN rec.error_message IS NOT NULL THEN rec.error_terminal
                    WHEN rec.advance AND r.failure_gen <= rec.generation THEN false
                    ELSE r.failure_terminal END AS n_terminal,
               CASE WHEN del.resource_id IS NULL THEN r.finalizers
                    ELSE coalesce(ARRAY(SELECT f FROM unnest(r.finalizers) f
                                         WHERE f <> ALL (array_replace(del.fins, NULL, kc.finalizer_name))
                                            OR f IS NULL), '{}') END AS n_finalizers,
               coalesce(kc.has_rollup, false) AS has_rollup
          FROM resources r
          LEFT JOIN rec ON rec.resource_id = r.id
          LEFT JOIN del ON del.resource_id = r.id
          LEFT JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
         WHERE r.id IN (SELECT rec.resource_id FROM rec UNION SELECT del.resource_id FROM del)
    ), upd AS (
        UPDATE resources r
           SET status           = p.n_status,
               synced_gen       = p.n_synced,
               health_ok        = p.n_health,
               failure_gen      = p.n_failure_gen,
               failure_terminal = p.n_terminal,
               finalizers       = p.n_finalizers,
               updated_at       = p_now
          FROM per p
         WHERE r.id = p.id
           AND (r.status, r.synced_gen, r.health_ok, r.failure_gen, r.failure_terminal, r.finalizers)
               IS DISTINCT FROM (p.n_status, p.n_synced, p.n_health, p.n_failure_gen, p.n_terminal, p.n_finalizers)
        RETURNING r.id, r.phase
    ), ev AS (
        INSERT INTO resource_events (resource_id, type, reason, message, created_at)
        SELECT p.id, 'Warning', 'ReconcileFailed', left(p.error_message, 4096), p_now
          FROM per p WHERE p.failed AND p.old_failure_gen <> p.task_gen
        UNION ALL
        SELECT p.id, CASE WHEN u.phase = 'Ready' THEN 'Normal' ELSE 'Warning' END, 'RolledUp',
               format('%s → %s', p.old_phase, u.phase), p_now
          FROM upd u JOIN per p ON p.id = u.id
         WHERE p.has_rollup AND p.ok AND u.phase <> p.old_phase
        UNION ALL
        SELECT i.resource_id, 'Warning', 'DeleteFailed', left(i.error_message, 4096), p_now
          FROM unnest(v_items) i
         WHERE i.task_type = 'delete' AND i.error_message IS NOT NULL AND i.attempts = 0
    )
    SELECT array_agg(p.id) FILTER (WHERE p.task_gen IS NOT NULL AND NOT p.retried AND p.n_synced < p.generation)
      INTO v_resched FROM per p;

    -- 5. conditions (transition-only), operations
    DELETE FROM resource_conditions c USING unnest(v_items) i
     WHERE i.task_type = 'reconcile' AND i.error_message IS NULL AND i.advance
       AND c.resource_id = i.resource_id AND c.type IN ('Synced', 'Ready') AND c.status = 'False'
       AND NOT coalesce(i.conditions @> jsonb_build_array(jsonb_build_object('type', c.type, 'status', 'False')), false);

    INSERT INTO resource_conditions AS c (resource_id, type, status, reason, message, observed_generation, last_transition_time)
    SELECT DISTINCT ON (x.resource_id, x.type) x.*
      FROM (SELECT i.resource_id, 'Synced' AS type, 'False' AS status, 'ReconcileError' AS reason,
                   left(i.error_message, 4096) AS message, i.generation, p_now AS ltt
              FROM unnest(v_items) i
             WHERE i.task_type = 'reconcile' AND i.error_message IS NOT NULL
            UNION ALL
            SELECT i.resource_id, e->>'type', e->>'status', e->>'reason', e->>'message', i.generation, p_now
              FROM unnest(v_items) i
              CROSS JOIN LATERAL jsonb_array_elements(i.conditions) e
             WHERE i.task_type = 'reconcile' AND i.error_message IS NULL AND jsonb_typeof(i.conditions) = 'array'
               AND jsonb_typeof(e) = 'object' AND coalesce(e->>'type', '') <> ''
               AND e->>'status' IN ('True', 'False', 'Unknown')) x
     ORDER BY x.resource_id, x.type
    ON CONFLICT (resource_id, type) DO UPDATE
       SET status               = EXCLUDED.status,
           reason               = EXCLUDED.reason,
           message              = EXCLUDED.message,
           observed_generation  = EXCLUDED.observed_generation,
           last_transition_time = CASE WHEN c.status IS DISTINCT FROM EXCLUDED.status
                                       THEN EXCLUDED.last_transition_time ELSE c.last_transition_time END
     WHERE (c.status, c.reason, c.message) IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message);

    UPDATE resource_operations op
       SET state       = CASE WHEN i.error_message IS NULL THEN 'Succeeded' ELSE 'Failed' END,
           output      = i.operation_output,
           error       = i.error_message,
           finished_at = p_now,
           updated_at  = p_now
      FROM unnest(v_items) i
     WHERE i.task_type = 'operate' AND op.id = i.op_id AND op.state IN ('Pending', 'Running');

    -- 6. still lagging, and substituted dependents: back through the gate
    IF v_resched IS NOT NULL OR v_subst IS NOT NULL THEN
        PERFORM schedule_candidates(coalesce(v_resched, '{}') || coalesce(v_subst, '{}'), p_now, false);
    END IF;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- drain_rollup_rechecks: straddle close-out for roots the cascade armed in
-- rollup_recheck. For up to p_max armed roots in shards [p_lo, p_hi]:
--   1. wait for the transactions still settling their descendants: FOR SHARE
--      on the unsettled descendants another transaction has touched (xmax set),
--      in id order — the same global order drainers lock in, so no deadlock,
--      and no rollup_recheck row is locked while waiting (an arming drainer
--      never waits on us). A row its settler committed is re-checked on its new
--      version, found settled and not locked at all;
--   2. re-run the gate (schedule_candidates, re-pend mode) in a fresh snapshot
--      that now sees every sibling the arming transactions could not;
--   3. delete the rows that pended (or already have their reconcile row), no
--      longer need one (gone, frozen, deleting, not a composed rollup root) or
--      can no longer be straddled (an idle unsettled descendant remains: its
--      own settle will cascade), judged in the delete's own snapshot so a
--      settler that started meanwhile keeps the row armed; and rows armed
--      longer than 30 s (the reaper's requeue is the backstop).
-- An empty queue costs one index probe. Returns the number of roots pended.
-- +goose StatementBegin
CREATE FUNCTION drain_rollup_rechecks(p_max int, p_lo int, p_hi int, p_now timestamptz DEFAULT now()) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_roots uuid[];
    v_top   uuid[];
    v_n     int;
BEGIN
    SELECT array_agg(x.root_id) INTO v_roots
      FROM (SELECT rr.root_id FROM rollup_recheck rr
             WHERE rr.shard_id BETWEEN p_lo AND p_hi
             ORDER BY rr.armed_at
             LIMIT p_max) x;
    IF v_roots IS NULL THEN
        RETURN 0;
    END IF;

    SELECT array_agg(r.id) FILTER (WHERE r.root_id IS NULL) INTO v_top
      FROM resources r WHERE r.id = ANY (v_roots);
    PERFORM 1 FROM resources d
     WHERE (d.root_id = ANY (v_top)
            OR d.id IN (SELECT descendant_ids(r.id) FROM resources r
                         WHERE r.id = ANY (v_roots) AND r.root_id IS NOT NULL))
       AND d.synced_gen < d.generation AND d.failure_gen <> d.generation
       AND d.frozen_until IS NULL AND d.deletion_requested_at IS NULL
       AND d.xmax <> '0'::xid
     ORDER BY d.id
       FOR SHARE;

    v_n := schedule_candidates(v_roots, p_now, true);

    DELETE FROM rollup_recheck rr
     WHERE rr.root_id = ANY (v_roots)
       AND (rr.armed_at < p_now - interval '30 seconds'
            OR EXISTS (SELECT 1 FROM work_queue w
                        WHERE w.shard_id = rr.shard_id AND w.resource_id = rr.root_id
                          AND w.task_type = 'reconcile'
                          AND w.op_id = '00000000-0000-0000-0000-000000000000')
            OR NOT EXISTS (SELECT 1 FROM resources r
                             JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
                            WHERE r.id = rr.root_id AND kc.has_rollup
                              AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
                              AND NOT (kc.has_composer AND r.composed_gen < r.generation)
                              AND NOT rollup_descendants_settled(r.id, r.root_id IS NULL)
                              AND rollup_straddle_possible(r.id, r.root_id IS NULL, 0)));
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- enqueue_operation: run an operator verb on a resource. Records a Pending
-- resource_operations row and queues its operate task (op_id = the
-- operation), snapshotting the attached providerconfig like the gate does.
-- Refuses an unknown resource (no_data_found), one being deleted
-- (object_not_in_prerequisite_state) and a verb its kind does not declare
-- (invalid_parameter_value).
-- +goose StatementBegin
CREATE FUNCTION enqueue_operation(p_resource uuid, p_verb text, p_input jsonb) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_r  resources%ROWTYPE;
    v_id uuid;
BEGIN
    SELECT * INTO v_r FROM resources WHERE id = p_resource FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = format('resource %s not found', p_resource);
    END IF;
    IF v_r.deletion_requested_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('resource %s/%s is being deleted', v_r.kind, v_r.name);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM kind_manifest m, jsonb_array_elements(m.manifest->'reactions') x
                    WHERE m.kind = v_r.kind AND m.version = v_r.version
                      AND x->>'trigger' = 'operation' AND x->>'verb' = p_verb) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('kind %s/%s declares no operation verb %L', v_r.kind, v_r.version, p_verb);
    END IF;
    INSERT INTO resource_operations (resource_id, verb, input) VALUES (p_resource, p_verb, p_input)
    RETURNING id INTO v_id;
    INSERT INTO work_queue (resource_id, task_type, op_id, shard_id, kind, version, generation, trigger,
                            provider_config, provider_bundle)
    SELECT v_r.id, 'operate', v_id, v_r.shard_id, v_r.kind, v_r.version, v_r.generation, 'operation',
           pc.spec, pc.data
      FROM (SELECT 1) one
      LEFT JOIN providerconfigs pc ON pc.kind = v_r.kind AND pc.name = v_r.provider_config_ref;
    PERFORM notify_gated('work_ready');
    RETURN v_id;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS enqueue_operation(uuid, text, jsonb), drain_rollup_rechecks(int, int, int, timestamptz),
    drain_outbox_batch(int, int, int, timestamptz), claim_budget(text, text, int);
DROP TYPE IF EXISTS drain_item;
DROP TRIGGER IF EXISTS resources_lifecycle_deleted ON resources;
DROP TRIGGER IF EXISTS resources_lifecycle_created ON resources;
DROP TRIGGER IF EXISTS cascade_on_ready_change ON resources;
DROP FUNCTION IF EXISTS on_resources_deleted(), emit_lifecycle_created(), cascade_on_ready_change(),
    value_flow_pairs(jsonb, jsonb), jsonb_set_pairs(jsonb, jsonb), json_pointer_path(text),
    schedule_eligible(uuid[], timestamptz), schedule_candidates(uuid[], timestamptz, boolean),
    rollup_straddle_possible(uuid, boolean, int), descendant_ids(uuid), rollup_descendants_settled(uuid, boolean), xmax_in_flight(xid);
