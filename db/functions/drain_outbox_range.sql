-- drain_outbox_range: the drainer's workhorse. Pops up to p_max work_outbox
-- results in shards [p_lo, p_hi] and applies them in this one transaction.
-- The pop goes partition by partition (each statement prunes to one
-- partition), starting at a random partition of the range so none starves
-- under load, and oldest first within each (idx_work_outbox_fifo: id is one
-- identity across partitions, so the pop is FIFO by arrival and the shard
-- range is a filter on it). Everything popped is then applied as ONE batch:
-- one sorted lock pass, the fence one partition per statement (queue TIDs are
-- unambiguous only inside one), one coalesced status update, so the cascade
-- and the other statement triggers run once per batch, not once per partition.
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
CREATE OR REPLACE FUNCTION drain_outbox_range(p_max int, p_lo int, p_hi int, p_now timestamptz) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan SET jit = off AS $$
DECLARE
    v_first   int := p_lo / 16;
    v_last    int := p_hi / 16;
    v_start   int;
    v_p       int;
    v_plo     int;
    v_phi     int;
    v_tids    tid[];
    v_part    work_outbox[];
    v_k       int;
    v_out     work_outbox[] := '{}';
    v_n       int := 0;
    v_pitems  drain_item[];
    v_pdels   boolean;
    v_pops    boolean;
    v_pconds  boolean;
    v_items   drain_item[] := '{}';
    v_dels    boolean := false;
    v_ops     boolean := false;
    v_conds   boolean := false;
    v_subst   uuid[];
    v_resched uuid[];
    i         int;
BEGIN
    IF p_max <= 0 OR p_lo > p_hi THEN
        RETURN 0;
    END IF;
    -- pop, one partition per statement (each prunes to it), from a random
    -- partition of the range so none starves under load: lock the oldest
    -- rows (idx_work_outbox_fifo, SKIP LOCKED), then delete exactly those
    -- tuples by TID (one partition: unambiguous)
    v_start := floor(random() * (v_last - v_first + 1))::int;
    FOR i IN 0 .. v_last - v_first LOOP
        EXIT WHEN v_n >= p_max;
        v_p := v_first + (v_start + i) % (v_last - v_first + 1);
        v_plo := greatest(p_lo, v_p * 16);
        v_phi := least(p_hi, v_p * 16 + 15);
        SELECT array_agg(x.ctid) INTO v_tids
          FROM (SELECT o.ctid FROM work_outbox o
                 WHERE o.shard_id BETWEEN v_plo AND v_phi
                 ORDER BY o.id
                 LIMIT p_max - v_n
                   FOR UPDATE SKIP LOCKED) x;
        CONTINUE WHEN v_tids IS NULL;
        WITH popped AS (
            DELETE FROM work_outbox o
             WHERE o.shard_id BETWEEN v_plo AND v_phi AND o.ctid = ANY (v_tids)
            RETURNING o
        )
        SELECT array_agg(popped.o), count(*) INTO v_part, v_k FROM popped;
        v_out := v_out || v_part;
        v_n := v_n + v_k;
    END LOOP;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;

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

    -- 2. fence, finish or re-pend the queue rows, give capped slots back,
    --    one partition per statement (TIDs are unambiguous only inside one).
    --    tgt locks each result's queue row by primary key, only while it
    --    still holds the result's claim_epoch; fin and rp then address those
    --    tuples by TID.
    FOR v_p IN SELECT DISTINCT u.shard_id / 16 FROM unnest(v_out) u LOOP
    v_plo := greatest(p_lo, v_p * 16);
    v_phi := least(p_hi, v_p * 16 + 15);
    WITH oc AS (
        SELECT o.*, (o.error_message IS NOT NULL
                     AND (o.task_type = 'delete'
                          OR (o.task_type = 'reconcile' AND NOT o.error_terminal
                              AND o.generation >= coalesce((SELECT r.generation FROM resources r
                                                             WHERE r.id = o.resource_id), 0)))) AS retry
          FROM (SELECT DISTINCT ON (u.shard_id, u.resource_id, u.task_type, u.op_id) u.*
                  FROM unnest(v_out) u
                 WHERE u.shard_id BETWEEN v_plo AND v_phi
                 ORDER BY u.shard_id, u.resource_id, u.task_type, u.op_id, u.claim_epoch DESC, u.id DESC) o
    ), tgt AS MATERIALIZED (
        SELECT oc.*, w.tid, w.kind, w.version, w.generation AS task_gen, w.trigger, w.attempts, w.leased
          FROM oc
          CROSS JOIN LATERAL (
              SELECT w.ctid AS tid, w.kind, w.version, w.generation, w.trigger, w.attempts,
                     w.worker_id IS NOT NULL AS leased
                FROM work_queue w
               WHERE w.shard_id BETWEEN v_plo AND v_phi
                 AND w.shard_id = oc.shard_id AND w.resource_id = oc.resource_id
                 AND w.task_type = oc.task_type AND w.op_id = oc.op_id
                 AND w.claim_epoch = oc.claim_epoch
                 FOR UPDATE) w
    ), fin AS (
        DELETE FROM work_queue w
         WHERE w.shard_id BETWEEN v_plo AND v_phi
           AND w.ctid = ANY (ARRAY(SELECT t.tid FROM tgt t WHERE NOT t.retry))
    ), rp AS (
        UPDATE work_queue w
           SET attempts     = w.attempts + 1,
               not_before   = p_now + least(interval '5 minutes', interval '1 second' * power(2, least(w.attempts, 16))),
               worker_id    = NULL,
               claim_epoch  = NULL,
               leased_at    = NULL,
               heartbeat_at = NULL
         WHERE w.shard_id BETWEEN v_plo AND v_phi
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
      INTO v_pitems, v_pdels, v_pops, v_pconds
      FROM tgt t;
    IF v_pitems IS NOT NULL THEN
        v_items := v_items || v_pitems;
        v_dels := v_dels OR v_pdels;
        v_ops := v_ops OR v_pops;
        v_conds := v_conds OR v_pconds;
    END IF;
    END LOOP;
    IF cardinality(v_items) = 0 THEN
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
