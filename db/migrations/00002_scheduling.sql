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
-- misjudged either way; rollup_gate covers that with its small remainder rule.
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
-- rollup_gate: the rollup gate, and the straddle probe in the same pass.
-- A composite root's rollup may run once every LIVE descendant is settled:
-- synced (synced_gen >= generation) or failed for its live spec. Frozen
-- (orphaned, quarantined) and deleting descendants are excluded, so they
-- never hold a rollup back. Returns
--   0  every live descendant settled: the gate is open;
--   1  some descendant still progressing, and no straddle possible;
--   2  some descendant still progressing, and a straddle is possible.
-- Straddle: when a root's last unsettled descendants are settled by two
-- concurrent drain transactions, neither snapshot sees "all settled" and
-- neither pends the root. That is only possible when every descendant this
-- snapshot still sees as unsettled is being (or has just been) written by a
-- transaction it cannot see (xmax_in_flight). One idle unsettled descendant
-- means its own settle will cascade to the root later: no straddle. At most
-- p_few remaining unsettled also counts as "possible" (the cascade passes 4:
-- it covers a MultiXactId xmax the in-flight test cannot read).
-- Cost: a top root (root_id IS NULL) reads at most five entries of
-- idx_resources_unsettled (whose predicate is exactly the unsettled test) in
-- the common case — one idle row among the first five ends the probe — which
-- keeps the per-batch root evaluation cheap on the 1M path; only a root whose
-- first five are all in flight walks further. A nested composite walks its
-- owner subtree (lazily: the walk stops as soon as the answer is known). Each
-- branch is planned on its own, and JIT is off (the recursive walk's estimate
-- would otherwise compile on every call).
-- +goose StatementBegin
CREATE FUNCTION rollup_gate(p_root uuid, p_top boolean, p_few int) RETURNS int
LANGUAGE plpgsql VOLATILE SET jit = off AS $$
DECLARE
    v_n    int;
    v_idle boolean;
BEGIN
    IF p_top THEN
        SELECT count(*), coalesce(bool_or(NOT xmax_in_flight(x.xmax)), false) INTO v_n, v_idle
          FROM (SELECT d.xmax FROM resources d
                 WHERE d.root_id = p_root
                   AND d.synced_gen < d.generation AND d.failure_gen <> d.generation
                   AND d.frozen_until IS NULL AND d.deletion_requested_at IS NULL
                 LIMIT 5) x;
        IF v_n = 0 THEN
            RETURN 0;
        ELSIF v_n <= p_few THEN
            RETURN 2;
        ELSIF v_idle THEN
            RETURN 1;
        ELSIF v_n < 5 THEN
            RETURN 2;
        END IF;
        RETURN CASE WHEN EXISTS (
                        SELECT 1 FROM resources d
                         WHERE d.root_id = p_root
                           AND d.synced_gen < d.generation AND d.failure_gen <> d.generation
                           AND d.frozen_until IS NULL AND d.deletion_requested_at IS NULL
                           AND NOT xmax_in_flight(d.xmax))
                    THEN 1 ELSE 2 END;
    END IF;
    WITH RECURSIVE sub AS (
        SELECT c.id, c.xmax AS x, c.synced_gen, c.generation, c.failure_gen, c.frozen_until, c.deletion_requested_at
          FROM resources c WHERE c.owner_id = p_root
        UNION ALL
        SELECT c.id, c.xmax, c.synced_gen, c.generation, c.failure_gen, c.frozen_until, c.deletion_requested_at
          FROM resources c JOIN sub s ON c.owner_id = s.id)
    SELECT count(*), coalesce(bool_or(NOT xmax_in_flight(u.x)), false) INTO v_n, v_idle
      FROM (SELECT d.x FROM sub d
             WHERE d.synced_gen < d.generation AND d.failure_gen <> d.generation
               AND d.frozen_until IS NULL AND d.deletion_requested_at IS NULL) u;
    RETURN CASE WHEN v_n = 0 THEN 0 WHEN v_n <= p_few OR NOT v_idle THEN 2 ELSE 1 END;
END
$$;
-- +goose StatementEnd

-- descendant_ids: the owner subtree of a composite (nested rollup roots).
-- +goose StatementBegin
CREATE FUNCTION descendant_ids(p_root uuid) RETURNS SETOF uuid
LANGUAGE sql STABLE SET jit = off AS $$
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
--     kind with no composer) has every live descendant settled (rollup_gate).
-- The attached providerconfig (provider_config_ref) is snapshotted into the
-- row: spec → provider_config, data → provider_bundle.
-- ON CONFLICT is gen-gated: only an unleased row is touched, and only to raise
-- its generation (which also resets its backoff), so re-running is idempotent
-- and never disturbs a running task. Rows are written in key order, so two
-- drainers scheduling the same roots and dependents queue up rather than
-- deadlock. A rollup root that failed only the descendant gate is armed in
-- rollup_recheck when a straddle is possible — behind a transaction advisory
-- try-lock on the root, so two drainers arming the same root never wait on
-- each other's uncommitted insert: the loser skips, and the winner's recheck
-- waits out the loser's in-flight rows anyway.
-- Wakes: notify_gated('work_ready') when a row was written, a direct
-- pg_notify('rollup_recheck') when a root was armed.
-- Plans: every lookup is a primary-key (or edge-index) probe driven from the
-- distinct ids — LATERAL … OFFSET 0 subqueries and correlated sub-selects the
-- planner cannot turn into scans — so the cached plan is right whatever the
-- batch size and however stale the statistics of a fast-growing resources
-- table (a plan that trusted them would scan idx_resources_lagging or the
-- whole table per batch). JIT is off: compiling costs more than running.
-- +goose StatementBegin
CREATE FUNCTION schedule_candidates(p_ids uuid[], p_now timestamptz, p_repend boolean) RETURNS int
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    v_n     int;
    v_armed int;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH cand AS MATERIALIZED (
        SELECT q.id, q.shard_id, q.kind, q.version, q.generation, q.root_id, q.provider_config_ref, q.rollup_gated,
               CASE WHEN NOT q.rollup_gated THEN 0 ELSE rollup_gate(q.id, q.root_id IS NULL, 4) END AS gate
          FROM (SELECT r.id, r.shard_id, r.kind, r.version, r.generation, r.root_id, r.provider_config_ref,
                       g.rollup_gated,
                       NOT EXISTS (SELECT 1 FROM resource_deps d JOIN resources u ON u.id = d.dependency_id
                                    WHERE d.dependent_id = r.id AND u.synced_gen < u.generation) AS upstream_ok
                  FROM (SELECT DISTINCT x.id FROM unnest(p_ids) AS x(id)) c
                  CROSS JOIN LATERAL (SELECT * FROM resources r WHERE r.id = c.id OFFSET 0) r
                  LEFT JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
                  CROSS JOIN LATERAL (
                      SELECT coalesce(kc.has_rollup, false)
                             AND NOT (coalesce(kc.has_composer, false) AND r.composed_gen < r.generation) AS rollup_gated
                  ) g
                 WHERE (r.synced_gen < r.generation OR (p_repend AND g.rollup_gated))
                   AND r.deletion_requested_at IS NULL
                   AND r.frozen_until IS NULL
                   AND NOT (r.failure_terminal AND r.failure_gen = r.generation)
                OFFSET 0) q
         WHERE q.upstream_ok
    ), ins AS (
        INSERT INTO work_queue AS w (resource_id, task_type, shard_id, kind, version, generation, trigger,
                                     provider_config, provider_bundle, not_before, created_at)
        SELECT c.id, 'reconcile', c.shard_id, c.kind, c.version, c.generation,
               CASE WHEN c.rollup_gated THEN 'childrenSettled' ELSE 'specChange' END,
               pc.spec, pc.data, p_now, p_now
          FROM cand c
          LEFT JOIN LATERAL (SELECT pc.spec, pc.data FROM providerconfigs pc
                              WHERE c.provider_config_ref IS NOT NULL
                                AND pc.kind = c.kind AND pc.name = c.provider_config_ref OFFSET 0) pc ON true
         WHERE c.gate = 0
         ORDER BY c.shard_id, c.id
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
         WHERE CASE WHEN c.gate = 2   -- CASE: take the lock only for a root being armed
                    THEN pg_try_advisory_xact_lock(hashtext('rollup_recheck'), hashtext(c.id::text)) END
         ORDER BY c.id
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
-- plpgsql on simple expressions only: no query per call.
-- +goose StatementBegin
CREATE FUNCTION json_pointer_path(p_pointer text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    v_path text[];
    i      int;
BEGIN
    IF p_pointer IN ('', '/') THEN
        RETURN '{}';
    END IF;
    v_path := string_to_array(substr(p_pointer, 2), '/');
    IF strpos(p_pointer, '~') > 0 THEN
        FOR i IN 1 .. cardinality(v_path) LOOP
            v_path[i] := replace(replace(v_path[i], '~1', '/'), '~0', '~');
        END LOOP;
    END IF;
    RETURN v_path;
END
$$;
-- +goose StatementEnd

-- apply_value_flows: substitute into a dependent's spec, in order, the flows
-- of each upstream in p_srcs = [[value_flows, upstream status], …]: for each
-- flow whose src_field is present in the status, set dep_field to it,
-- creating missing intermediate objects. A flow whose path runs through a
-- scalar, or indexes an array with a non-number, is skipped rather than
-- raised: a bad flow must never wedge a drain batch. Simple expressions only.
-- +goose StatementBegin
CREATE FUNCTION apply_value_flows(p_spec jsonb, p_srcs jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v_doc    jsonb := p_spec;
    v_flows  jsonb;
    v_status jsonb;
    v_flow   jsonb;
    v_val    jsonb;
    v_path   text[];
    v_node   jsonb;
    v_ok     boolean;
    s        int;
    f        int;
    i        int;
BEGIN
    IF jsonb_typeof(p_srcs) IS DISTINCT FROM 'array' THEN
        RETURN p_spec;
    END IF;
    FOR s IN 0 .. jsonb_array_length(p_srcs) - 1 LOOP
        v_flows := p_srcs->s->0;
        v_status := p_srcs->s->1;
        CONTINUE WHEN jsonb_typeof(v_flows) IS DISTINCT FROM 'array' OR v_status IS NULL;
        FOR f IN 0 .. jsonb_array_length(v_flows) - 1 LOOP
            v_flow := v_flows->f;
            CONTINUE WHEN jsonb_typeof(v_flow->'src_field') IS DISTINCT FROM 'string'
                       OR jsonb_typeof(v_flow->'dep_field') IS DISTINCT FROM 'string';
            v_val := v_status #> json_pointer_path(v_flow->>'src_field');
            CONTINUE WHEN v_val IS NULL;
            v_path := json_pointer_path(v_flow->>'dep_field');
            CONTINUE WHEN cardinality(v_path) = 0;
            IF v_doc IS NULL OR jsonb_typeof(v_doc) NOT IN ('object', 'array') THEN
                v_doc := '{}';
            END IF;
            v_ok := true;
            FOR i IN 1 .. cardinality(v_path) LOOP
                v_node := CASE WHEN i = 1 THEN v_doc ELSE v_doc #> v_path[1:i - 1] END;
                IF jsonb_typeof(v_node) = 'array' AND v_path[i] !~ '^-?[0-9]+$' THEN
                    v_ok := false;
                    EXIT;
                END IF;
                IF i < cardinality(v_path) THEN
                    v_node := v_doc #> v_path[1:i];
                    IF v_node IS NULL THEN
                        v_doc := jsonb_set(v_doc, v_path[1:i], '{}', true);
                    ELSIF jsonb_typeof(v_node) NOT IN ('object', 'array') THEN
                        v_ok := false;   -- a scalar in the way: leave the spec alone
                        EXIT;
                    END IF;
                END IF;
            END LOOP;
            CONTINUE WHEN NOT v_ok;
            v_doc := jsonb_set(v_doc, v_path, v_val, true);
        END LOOP;
    END LOOP;
    RETURN v_doc;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- ready_change: one updated row as the cascade sees it, old and new side folded.
CREATE TYPE ready_change AS (
    id              uuid,
    owner_id        uuid,
    root_id         uuid,
    kind            text,
    shard_id        int,
    generation      bigint,
    labels          jsonb,
    newly_synced    boolean,
    rollup_event    boolean,
    became_degraded boolean,
    became_failed   boolean,
    snapshot        jsonb
);


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
--     rollup_gate);
--   * lifecycle_outbox rows for synced / degraded / failed, one per matching
--     enabled binding, each behind an EXISTS short-circuit on the partial
--     idx_reactor_bindings_transition, so with no binding it is one probe and
--     no join; a direct pg_notify('lifecycle_ready') when rows were written.
-- +goose StatementBegin
CREATE FUNCTION cascade_on_ready_change() RETURNS trigger
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    v_synced   boolean := EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'synced');
    v_degraded boolean := EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'degraded');
    v_failed   boolean := EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'failed');
    v_ch       ready_change[];
    v_deps     uuid[];
    v_roots    uuid[];
    v_k        int;
    v_life     int := 0;
BEGIN
    -- Fold the old and new side of each row with one aggregation: transition
    -- tables carry no statistics, and a join between them is planned as a
    -- nested loop, quadratic in the batch.
    SELECT array_agg(ROW(g.id, g.owner_id, g.root_id, g.kind, g.shard_id, g.generation, g.labels, g.newly_synced,
                         g.newly_synced OR g.left_unsettled OR g.health_flip OR g.failure_flip,
                         g.became_degraded, g.became_failed, g.snapshot)::ready_change)
      INTO v_ch
      FROM (SELECT x.id,
                   (array_agg(x.owner_id) FILTER (WHERE x.is_new))[1] AS owner_id,
                   (array_agg(x.root_id) FILTER (WHERE x.is_new))[1] AS root_id,
                   (array_agg(x.kind) FILTER (WHERE x.is_new))[1] AS kind,
                   max(x.shard_id) AS shard_id,
                   max(x.generation) FILTER (WHERE x.is_new) AS generation,
                   (array_agg(x.labels) FILTER (WHERE x.is_new))[1] AS labels,
                   (array_agg(x.snapshot) FILTER (WHERE x.is_new))[1] AS snapshot,
                   bool_or(x.is_new AND x.synced_gen >= x.generation)
                   AND max(x.synced_gen) FILTER (WHERE x.is_new) > max(x.synced_gen) FILTER (WHERE NOT x.is_new)
                       AS newly_synced,
                   bool_or(x.unsettled AND NOT x.is_new) AND NOT bool_or(x.unsettled AND x.is_new) AS left_unsettled,
                   bool_or(x.health_ok) <> bool_and(x.health_ok) AS health_flip,
                   bool_or(x.failed) <> bool_and(x.failed) AS failure_flip,
                   bool_or(x.is_new AND x.phase = 'Degraded') AND NOT bool_or(NOT x.is_new AND x.phase = 'Degraded')
                       AS became_degraded,
                   bool_or(x.is_new AND x.failed)
                   AND max(x.failure_gen) FILTER (WHERE x.is_new) <> max(x.failure_gen) FILTER (WHERE NOT x.is_new)
                       AS became_failed
              FROM (SELECT false AS is_new, o.id, o.owner_id, o.root_id, o.kind, o.shard_id, o.generation,
                           o.synced_gen, o.failure_gen, o.health_ok, o.phase, o.labels, NULL::jsonb AS snapshot,
                           o.failure_gen = o.generation AS failed,
                           o.synced_gen < o.generation AND o.failure_gen <> o.generation
                           AND o.frozen_until IS NULL AND o.deletion_requested_at IS NULL AS unsettled
                      FROM old_rows o
                    UNION ALL
                    SELECT true, n.id, n.owner_id, n.root_id, n.kind, n.shard_id, n.generation,
                           n.synced_gen, n.failure_gen, n.health_ok, n.phase, n.labels,
                           CASE WHEN v_synced OR v_degraded OR v_failed THEN to_jsonb(n) END,
                           n.failure_gen = n.generation,
                           n.synced_gen < n.generation AND n.failure_gen <> n.generation
                           AND n.frozen_until IS NULL AND n.deletion_requested_at IS NULL
                      FROM new_rows n) x
             GROUP BY x.id) g
     WHERE g.newly_synced OR g.left_unsettled OR g.health_flip OR g.failure_flip
        OR g.became_degraded OR g.became_failed;
    IF v_ch IS NULL THEN
        RETURN NULL;
    END IF;

    SELECT array_agg(DISTINCT d.dependent_id) INTO v_deps
      FROM unnest(v_ch) c
      CROSS JOIN LATERAL (SELECT d.dependent_id FROM resource_deps d WHERE d.dependency_id = c.id OFFSET 0) d
     WHERE c.newly_synced;
    SELECT array_agg(r.id) INTO v_roots
      FROM (SELECT c.owner_id AS id FROM unnest(v_ch) c WHERE c.rollup_event AND c.owner_id IS NOT NULL
            UNION
            SELECT c.root_id FROM unnest(v_ch) c WHERE c.rollup_event AND c.root_id IS NOT NULL) x
      CROSS JOIN LATERAL (SELECT r.id, r.kind, r.version FROM resources r WHERE r.id = x.id OFFSET 0) r
      JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
     WHERE kc.has_rollup;
    IF v_deps IS NOT NULL THEN
        PERFORM schedule_candidates(v_deps, now(), false);
    END IF;
    IF v_roots IS NOT NULL THEN
        PERFORM schedule_candidates(v_roots, now(), true);
    END IF;

    IF v_synced THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT c.id, 'synced', c.generation, b.name, c.shard_id, b.reactor, c.kind, c.snapshot
          FROM unnest(v_ch) c
          JOIN reactor_bindings b ON b.enabled AND b.transition = 'synced' AND b.watch_kind = c.kind
                                 AND c.labels @> b.label_match
         WHERE c.newly_synced
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_k = ROW_COUNT;
        v_life := v_life + v_k;
    END IF;
    IF v_degraded THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT c.id, 'degraded', c.generation, b.name, c.shard_id, b.reactor, c.kind, c.snapshot
          FROM unnest(v_ch) c
          JOIN reactor_bindings b ON b.enabled AND b.transition = 'degraded' AND b.watch_kind = c.kind
                                 AND c.labels @> b.label_match
         WHERE c.became_degraded
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_k = ROW_COUNT;
        v_life := v_life + v_k;
    END IF;
    IF v_failed THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT c.id, 'failed', c.generation, b.name, c.shard_id, b.reactor, c.kind, c.snapshot
          FROM unnest(v_ch) c
          JOIN reactor_bindings b ON b.enabled AND b.transition = 'failed' AND b.watch_kind = c.kind
                                 AND c.labels @> b.label_match
         WHERE c.became_failed
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
LANGUAGE plpgsql SET enable_hashjoin = off SET enable_mergejoin = off SET jit = off AS $$
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

-- drain_outbox_partition: the drainer's workhorse, for a shard range inside
-- one partition. Pops up to p_max work_outbox rows in shard_id BETWEEN p_lo
-- AND p_hi and applies them:
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
--      failure_gen/failure_terminal (cleared on success, stamped on failure).
--      Its AFTER STATEMENT trigger is the cascade.
--      Events for failures (first of a generation) and rollup phase changes —
--      never for a plain leaf success;
--   5. a delete task strips its finalizer (the sweep removes the row);
--   6. resource_conditions on transition only (last_transition_time moves only
--      when status does), stored False Synced/Ready cleared on a clean
--      reconcile; operations finished;
--   7. resources that are still lagging (moved on past the task's generation,
--      a composite deferring its rollup, a terminal failure of an older spec),
--      and dependents re-substituted by an upstream that was already synced,
--      go back through the gate.
-- Plans are custom per call (the batch arrays' real sizes are what the
-- planner sees), lookups are primary-key probes (LATERAL … OFFSET 0) and
-- queue rows are addressed by TID once locked: the queue partitions are never
-- scanned. Returns the number of outbox rows popped.
-- +goose StatementBegin
CREATE FUNCTION drain_outbox_partition(p_max int, p_lo int, p_hi int, p_now timestamptz) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan SET jit = off AS $$
DECLARE
    v_tids    tid[];
    v_out     work_outbox[];
    v_n       int;
    v_items   drain_item[];
    v_dels    boolean;
    v_ops     boolean;
    v_conds   boolean;
    v_subst   uuid[];
    v_resched uuid[];
BEGIN
    IF p_lo / 16 <> p_hi / 16 THEN
        RAISE EXCEPTION 'drain_outbox_partition: shards % - % span partitions', p_lo, p_hi;
    END IF;
    -- pop: lock the oldest rows of the range (ordered PK scan, SKIP LOCKED),
    -- then delete exactly those tuples by TID (one partition: unambiguous)
    SELECT array_agg(x.ctid) INTO v_tids
      FROM (SELECT o.ctid FROM work_outbox o
             WHERE o.shard_id BETWEEN p_lo AND p_hi
             ORDER BY o.shard_id, o.id
             LIMIT p_max
               FOR UPDATE SKIP LOCKED) x;
    IF v_tids IS NULL THEN
        RETURN 0;
    END IF;
    WITH popped AS (
        DELETE FROM work_outbox o
         WHERE o.shard_id BETWEEN p_lo AND p_hi AND o.ctid = ANY (v_tids)
        RETURNING o
    )
    SELECT array_agg(popped.o), count(*) INTO v_out, v_n FROM popped;

    -- 1. lock, in id order (the lateral subquery locks row by row, in the
    --    order of the sorted ids)
    PERFORM 1
       FROM (SELECT DISTINCT x.id
               FROM (SELECT u.resource_id AS id FROM unnest(v_out) u
                     UNION ALL
                     SELECT d.dependent_id FROM unnest(v_out) u
                      CROSS JOIN LATERAL (SELECT d.dependent_id FROM resource_deps d
                                           WHERE d.dependency_id = u.resource_id AND d.value_flows <> '[]'::jsonb
                                          OFFSET 0) d
                      WHERE u.task_type = 'reconcile' AND u.error_message IS NULL AND u.status IS NOT NULL) x
              ORDER BY x.id) ids
      CROSS JOIN LATERAL (SELECT 1 FROM resources r WHERE r.id = ids.id FOR NO KEY UPDATE) l;

    -- 2. fence, finish or re-pend the queue rows, give capped slots back.
    --    tgt locks each result's queue row by primary key, only while it
    --    still holds the result's claim_epoch; fin and rp then address those
    --    tuples by TID.
    WITH oc AS (
        SELECT o.*, (o.error_message IS NOT NULL
                     AND (o.task_type = 'delete'
                          OR (o.task_type = 'reconcile' AND NOT o.error_terminal
                              AND o.generation >= coalesce((SELECT r.generation FROM resources r
                                                             WHERE r.id = o.resource_id), 0)))) AS retry
          FROM (SELECT DISTINCT ON (u.shard_id, u.resource_id, u.task_type, u.op_id) u.*
                  FROM unnest(v_out) u
                 ORDER BY u.shard_id, u.resource_id, u.task_type, u.op_id, u.claim_epoch DESC, u.id DESC) o
    ), tgt AS MATERIALIZED (
        SELECT oc.*, w.tid, w.kind, w.version, w.generation AS task_gen, w.trigger, w.attempts, w.leased
          FROM oc
          CROSS JOIN LATERAL (
              SELECT w.ctid AS tid, w.kind, w.version, w.generation, w.trigger, w.attempts,
                     w.worker_id IS NOT NULL AS leased
                FROM work_queue w
               WHERE w.shard_id BETWEEN p_lo AND p_hi
                 AND w.shard_id = oc.shard_id AND w.resource_id = oc.resource_id
                 AND w.task_type = oc.task_type AND w.op_id = oc.op_id
                 AND w.claim_epoch = oc.claim_epoch
                 FOR UPDATE) w
    ), fin AS (
        DELETE FROM work_queue w
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.ctid = ANY (ARRAY(SELECT t.tid FROM tgt t WHERE NOT t.retry))
    ), rp AS (
        UPDATE work_queue w
           SET attempts     = w.attempts + 1,
               not_before   = p_now + least(interval '5 minutes', interval '1 second' * power(2, least(w.attempts, 16))),
               worker_id    = NULL,
               claim_epoch  = NULL,
               leased_at    = NULL,
               heartbeat_at = NULL
         WHERE w.shard_id BETWEEN p_lo AND p_hi
           AND w.ctid = ANY (ARRAY(SELECT t.tid FROM tgt t WHERE t.retry))
    ), cap AS (
        INSERT INTO kind_inflight AS k (kind, version, range_lo, in_flight)
        SELECT t.kind, t.version, p_lo, -count(*)
          FROM tgt t JOIN kind_config kc ON kc.kind = t.kind AND kc.version = t.version
         WHERE kc.max_inflight > 0 AND t.leased
         GROUP BY t.kind, t.version
        ON CONFLICT (kind, version, range_lo) DO UPDATE SET in_flight = k.in_flight + EXCLUDED.in_flight
    )
    SELECT array_agg(ROW(t.resource_id, t.shard_id, t.task_type, t.op_id, t.kind, t.version, t.task_gen, t.trigger,
                         t.attempts, t.retry, t.status, t.health_ok, t.advance_synced_gen, t.conditions,
                         t.error_message, t.error_terminal, t.finalizer, t.operation_output)::drain_item),
           bool_or(t.task_type = 'delete' AND t.error_message IS NULL),
           bool_or(t.task_type = 'operate'),
           bool_or(t.error_message IS NOT NULL OR t.conditions IS NOT NULL)
      INTO v_items, v_dels, v_ops, v_conds
      FROM tgt t;
    IF v_items IS NULL THEN
        RETURN v_n;
    END IF;

    -- 3. value flows into dependents of changed statuses
    --    A dependent whose every changed upstream is syncing in this batch is
    --    scheduled by the cascade; the others (an upstream re-synced with a new
    --    status) are scheduled in step 7.
    WITH srcs AS (
        SELECT d.dependent_id, jsonb_agg(jsonb_build_array(d.value_flows, i.status) ORDER BY d.dependency_id) AS srcs,
               bool_and(i.advance AND u.synced_gen < i.generation) AS cascaded
          FROM unnest(v_items) i
          CROSS JOIN LATERAL (SELECT u.status, u.synced_gen FROM resources u WHERE u.id = i.resource_id OFFSET 0) u
          CROSS JOIN LATERAL (SELECT d.dependent_id, d.dependency_id, d.value_flows FROM resource_deps d
                               WHERE d.dependency_id = i.resource_id AND d.value_flows <> '[]'::jsonb OFFSET 0) d
         WHERE i.task_type = 'reconcile' AND i.error_message IS NULL AND i.status IS NOT NULL
           AND i.status IS DISTINCT FROM u.status
         GROUP BY d.dependent_id
    ), subst AS (
        SELECT r.id, apply_value_flows(r.spec, s.srcs) AS spec, r.spec AS old_spec, s.cascaded
          FROM srcs s
          CROSS JOIN LATERAL (SELECT r.id, r.spec FROM resources r
                               WHERE r.id = s.dependent_id AND r.frozen_until IS NULL
                                 AND r.deletion_requested_at IS NULL OFFSET 0) r
    ), upd AS (
        UPDATE resources r SET spec = s.spec, updated_at = p_now
          FROM subst s
         WHERE r.id = s.id AND s.spec IS DISTINCT FROM s.old_spec
        RETURNING r.id, s.cascaded
    )
    SELECT array_agg(upd.id) FILTER (WHERE NOT upd.cascaded) INTO v_subst FROM upd;

    -- 4. the coalesced status update (its AFTER STATEMENT trigger is the cascade)
    WITH per AS (
        SELECT r.id, r.phase AS old_phase, r.generation, r.failure_gen AS old_failure_gen,
               i.generation AS task_gen, i.retried, i.error_message,
               i.error_message IS NULL AS ok,
               CASE WHEN i.error_message IS NULL THEN coalesce(i.status, r.status) ELSE r.status END AS n_status,
               CASE WHEN i.error_message IS NULL AND i.advance
                    THEN greatest(r.synced_gen, i.generation) ELSE r.synced_gen END AS n_synced,
               CASE WHEN i.error_message IS NULL THEN coalesce(i.health_ok, r.health_ok) ELSE r.health_ok END AS n_health,
               CASE WHEN i.error_message IS NOT NULL THEN i.generation
                    WHEN i.advance AND r.failure_gen <= i.generation THEN 0
                    ELSE r.failure_gen END AS n_failure_gen,
               CASE WHEN i.error_message IS NOT NULL THEN i.error_terminal
                    WHEN i.advance AND r.failure_gen <= i.generation THEN false
                    ELSE r.failure_terminal END AS n_terminal,
               coalesce(kc.has_rollup, false) AS has_rollup
          FROM unnest(v_items) i
          CROSS JOIN LATERAL (SELECT * FROM resources r WHERE r.id = i.resource_id OFFSET 0) r
          LEFT JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
         WHERE i.task_type = 'reconcile'
    ), upd AS (
        UPDATE resources r
           SET status           = p.n_status,
               synced_gen       = p.n_synced,
               health_ok        = p.n_health,
               failure_gen      = p.n_failure_gen,
               failure_terminal = p.n_terminal,
               updated_at       = p_now
          FROM per p
         WHERE r.id = p.id
           AND (r.status, r.synced_gen, r.health_ok, r.failure_gen, r.failure_terminal)
               IS DISTINCT FROM (p.n_status, p.n_synced, p.n_health, p.n_failure_gen, p.n_terminal)
        RETURNING r.id, r.phase, p.old_phase, p.has_rollup, p.ok
    ), ev AS (
        INSERT INTO resource_events (resource_id, type, reason, message, created_at)
        SELECT p.id, 'Warning', 'ReconcileFailed', left(p.error_message, 4096), p_now
          FROM per p WHERE NOT p.ok AND p.old_failure_gen <> p.task_gen
        UNION ALL
        SELECT u.id, CASE WHEN u.phase = 'Ready' THEN 'Normal' ELSE 'Warning' END, 'RolledUp',
               format('%s → %s', u.old_phase, u.phase), p_now
          FROM upd u
         WHERE u.has_rollup AND u.ok AND u.phase <> u.old_phase
    )
    SELECT array_agg(p.id) FILTER (WHERE NOT p.retried AND p.n_synced < p.generation)
      INTO v_resched FROM per p;

    -- 5. delete tasks strip their finalizer (the sweep removes the row)
    IF v_dels THEN
        UPDATE resources r
           SET finalizers = coalesce(ARRAY(SELECT f FROM unnest(r.finalizers) f
                                            WHERE f IS DISTINCT FROM coalesce(d.finalizer, kc.finalizer_name)), '{}'),
               updated_at = p_now
          FROM unnest(v_items) d
          LEFT JOIN kind_config kc ON kc.kind = d.kind AND kc.version = d.version
         WHERE d.task_type = 'delete' AND d.error_message IS NULL AND r.id = d.resource_id
           AND coalesce(d.finalizer, kc.finalizer_name) = ANY (r.finalizers);
    END IF;
    INSERT INTO resource_events (resource_id, type, reason, message, created_at)
    SELECT i.resource_id, 'Warning', 'DeleteFailed', left(i.error_message, 4096), p_now
      FROM unnest(v_items) i
     WHERE i.task_type = 'delete' AND i.error_message IS NOT NULL AND i.attempts = 0;

    -- 6. conditions (transition-only), operations
    IF EXISTS (SELECT 1 FROM resource_conditions) THEN
        DELETE FROM resource_conditions c USING unnest(v_items) i
         WHERE i.task_type = 'reconcile' AND i.error_message IS NULL AND i.advance
           AND c.resource_id = i.resource_id AND c.type IN ('Synced', 'Ready') AND c.status = 'False'
           AND NOT coalesce(i.conditions @> jsonb_build_array(jsonb_build_object('type', c.type, 'status', 'False')), false);
    END IF;
    IF v_conds THEN
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
    END IF;
    IF v_ops THEN
        UPDATE resource_operations op
           SET state       = CASE WHEN i.error_message IS NULL THEN 'Succeeded' ELSE 'Failed' END,
               output      = i.operation_output,
               error       = i.error_message,
               finished_at = p_now,
               updated_at  = p_now
          FROM unnest(v_items) i
         WHERE i.task_type = 'operate' AND op.id = i.op_id AND op.state IN ('Pending', 'Running');
    END IF;

    -- 7. still lagging, and substituted dependents: back through the gate
    IF v_resched IS NOT NULL OR v_subst IS NOT NULL THEN
        PERFORM schedule_candidates(coalesce(v_resched, '{}') || coalesce(v_subst, '{}'), p_now, false);
    END IF;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- drain_outbox_batch: the drainer's entry point. Drains up to p_max results
-- in shards [p_lo, p_hi], one partition at a time (drain_outbox_partition),
-- starting at a random partition of the range so none starves under load.
-- Returns the number of outbox rows popped.
-- +goose StatementBegin
CREATE FUNCTION drain_outbox_batch(p_max int, p_lo int, p_hi int, p_now timestamptz DEFAULT now()) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_first int := p_lo / 16;
    v_last  int := p_hi / 16;
    v_n     int := 0;
    v_start int;
    v_p     int;
    i       int;
BEGIN
    IF p_max <= 0 OR p_lo > p_hi THEN
        RETURN 0;
    END IF;
    v_start := floor(random() * (v_last - v_first + 1))::int;
    FOR i IN 0 .. v_last - v_first LOOP
        EXIT WHEN v_n >= p_max;
        v_p := v_first + (v_start + i) % (v_last - v_first + 1);
        v_n := v_n + drain_outbox_partition(p_max - v_n, greatest(p_lo, v_p * 16), least(p_hi, v_p * 16 + 15), p_now);
    END LOOP;
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
LANGUAGE plpgsql SET jit = off AS $$
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
                              AND rollup_gate(r.id, r.root_id IS NULL, 0) = 2));
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
    drain_outbox_batch(int, int, int, timestamptz), drain_outbox_partition(int, int, int, timestamptz), claim_budget(text, text, int);
DROP TYPE IF EXISTS drain_item;
DROP TRIGGER IF EXISTS resources_lifecycle_deleted ON resources;
DROP TRIGGER IF EXISTS resources_lifecycle_created ON resources;
DROP TRIGGER IF EXISTS cascade_on_ready_change ON resources;
DROP FUNCTION IF EXISTS on_resources_deleted(), emit_lifecycle_created(), cascade_on_ready_change(),
    apply_value_flows(jsonb, jsonb), json_pointer_path(text),
    schedule_eligible(uuid[], timestamptz), schedule_candidates(uuid[], timestamptz, boolean),
    rollup_gate(uuid, boolean, int), descendant_ids(uuid), xmax_in_flight(xid);
DROP TYPE IF EXISTS ready_change;
