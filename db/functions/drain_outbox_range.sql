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
-- Each step is one statement or a helper named for it, called once with the
-- whole batch (set-based: no plpgsql runs per row):
--   1. drain_lock: lock the resources concerned, in id order, so concurrent
--      drainers cannot deadlock on resources;
--   2. the fence, here beside the pop (both go partition by partition, and
--      the fence builds the batch, drain_item[], that the helpers take): a
--      result applies only if its work_queue row still holds the result's
--      claim_epoch; a stale result (released, reaped, re-claimed) is dropped.
--      Several results for one task coalesce to the newest. Finished rows are
--      deleted; a transient reconcile failure for the live spec and a failed
--      delete re-pend the same row with exponential backoff (attempts+1,
--      not_before, lease cleared) — unless that failure is the kind's
--      max_transient_attempts-th in a row (kind_config; 0 = no bound): then
--      the reconcile is dead-lettered, finished as a terminal failure whose
--      message says so, so a poison pill never re-queues forever. Capped
--      kinds give their in-flight back to the drainer's kind_inflight
--      partial (range_lo = p_lo);
--   3. drain_value_flows: upstream statuses into dependents' specs, before
--      the status update, so the cascade sees them at their new generation;
--      a dependent whose flowed value its schema refused has its own
--      reconcile result dropped from the batch (converge.value_flow_failed);
--   4. drain_apply: the coalesced status update (the cascade) and its events;
--   5. drain_finish_deletes: finalizers stripped, delete failures recorded;
--   6. drain_conditions, drain_dead_letters, drain_finish_operations:
--      conditions on transition only (a dead letter's Synced=False reason
--      DeadLettered and its event), operations finished;
--   7. the re-gate: resources still lagging after the update, and dependents
--      re-substituted by an upstream that was already synced, go back through
--      schedule_candidates; so do rollup roots whose finished lease the
--      cascade marked rerun (a descendant changed while the rollup ran), in
--      re-pend mode, so the composite rolls up the subtree as it is now.
--   8. teardown_advance: the rows whose teardown task succeeded and left
--      no finalizer (stripped in step 5) are removed, and their owners and
--      dependencies, locked in step 1, get their own teardown queued once
--      nothing below them is left: a delete moves up the tree as fast as
--      its teardowns finish, not at the reaper's pace.
-- Plans are custom per call (the batch arrays' real sizes are what the
-- planner sees; the helpers run under this function's SET clauses), lookups
-- are primary-key probes (LATERAL … OFFSET 0) and queue rows are addressed by
-- TID once locked: the queue partitions are never scanned. Returns the number
-- of outbox rows popped.
CREATE OR REPLACE FUNCTION drain_outbox_range(p_max int, p_lo int, p_hi int, p_now timestamptz) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan SET jit = off AS $$
DECLARE
    v_first   int := p_lo / 16;
    v_last    int := p_hi / 16;
    v_start   int;
    v_p       int;
    v_plo     int;
    v_phi     int;
    v_part    work_outbox[];
    v_k       int;
    v_out     work_outbox[] := '{}';
    v_n       int := 0;
    v_pitems  drain_item[];
    v_pdels   boolean;
    v_pops    boolean;
    v_pconds  boolean;
    v_fin     tid[];
    v_rp      tid[];
    v_gucs    text[];
    v_items   drain_item[] := '{}';
    v_dels    boolean := false;
    v_ops     boolean := false;
    v_conds   boolean := false;
    v_pdead   uuid[];
    v_prerun  uuid[];
    v_rerun   uuid[] := '{}';
    v_dead    uuid[] := '{}';
    v_subst   uuid[];
    v_failed  jsonb;
    v_resched uuid[];
    i         int;
BEGIN
    IF p_max <= 0 OR p_lo > p_hi THEN
        RETURN 0;
    END IF;
    -- pop, one partition per statement (each prunes to it), from a random
    -- partition of the range so none starves under load: lock the oldest
    -- rows (idx_work_outbox_fifo, SKIP LOCKED) and delete exactly those
    -- tuples by TID (one partition: unambiguous), in one statement. The TIDs
    -- come from an ARRAY(subquery), which the planner cannot count, so the
    -- delete is always a Tid Scan; a TID array held in a variable is a known
    -- constant under the custom plan, and a few hundred TIDs on a partition
    -- of a few pages costed a Seq Scan of the whole partition instead.
    v_start := floor(random() * (v_last - v_first + 1))::int;
    FOR i IN 0 .. v_last - v_first LOOP
        EXIT WHEN v_n >= p_max;
        v_p := v_first + (v_start + i) % (v_last - v_first + 1);
        v_plo := greatest(p_lo, v_p * 16);
        v_phi := least(p_hi, v_p * 16 + 15);
        WITH popped AS (
            DELETE FROM work_outbox o
             WHERE o.shard_id BETWEEN v_plo AND v_phi
               AND o.ctid = ANY (ARRAY(SELECT x.ctid FROM work_outbox x
                                        WHERE x.shard_id BETWEEN v_plo AND v_phi
                                        ORDER BY x.id
                                        LIMIT p_max - v_n
                                          FOR UPDATE SKIP LOCKED))
            RETURNING o
        )
        SELECT array_agg(popped.o), count(*) INTO v_part, v_k FROM popped;
        CONTINUE WHEN v_k = 0;
        v_out := v_out || v_part;
        v_n := v_n + v_k;
    END LOOP;
    IF v_n = 0 THEN
        RETURN 0;
    END IF;

    -- 1. lock
    PERFORM drain_lock(v_out);

    -- 2. fence, finish or re-pend the queue rows, give capped slots back,
    --    one partition per statement (TIDs are unambiguous only inside one).
    --    tgt locks each result's queue row by primary key, only while it
    --    still holds the result's claim_epoch; the finish and the re-pend
    --    then address those tuples by TID, in statements of their own.
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
        SELECT oc.*, w.tid, w.kind, w.version, w.generation AS task_gen, w.trigger, w.attempts, w.leased, w.rerun,
               coalesce(oc.retry AND oc.task_type = 'reconcile' AND dl.max_attempts > 0
                        AND w.attempts + 1 >= dl.max_attempts, false) AS dead,
               dl.max_attempts
          FROM oc
          CROSS JOIN LATERAL (
              SELECT w.ctid AS tid, w.kind, w.version, w.generation, w.trigger, w.attempts,
                     w.worker_id IS NOT NULL AS leased, w.rerun
                FROM work_queue w
               WHERE w.shard_id BETWEEN v_plo AND v_phi
                 AND w.shard_id = oc.shard_id AND w.resource_id = oc.resource_id
                 AND w.task_type = oc.task_type AND w.op_id = oc.op_id
                 AND w.claim_epoch = oc.claim_epoch
                 FOR UPDATE) w
          LEFT JOIN LATERAL (
              SELECT kc.max_transient_attempts AS max_attempts
                FROM kind_config kc
               WHERE oc.retry AND kc.kind = w.kind AND kc.version = w.version) dl ON true
    ), cap AS (
        INSERT INTO kind_inflight AS k (kind, version, range_lo, in_flight)
        SELECT t.kind, t.version, p_lo, -count(*)
          FROM tgt t JOIN kind_config kc ON kc.kind = t.kind AND kc.version = t.version
         WHERE kc.max_inflight > 0 AND t.leased
         GROUP BY t.kind, t.version
        ON CONFLICT (kind, version, range_lo) DO UPDATE SET in_flight = k.in_flight + EXCLUDED.in_flight
    )
    SELECT array_agg(ROW(t.resource_id, t.shard_id, t.task_type, t.op_id, t.kind, t.version, t.task_gen, t.trigger,
                         t.attempts, t.retry AND NOT t.dead, t.status, t.health_ok, t.advance_synced_gen, t.conditions,
                         CASE WHEN t.dead
                              THEN format('dead-lettered after %s transient failures in a row (max_transient_attempts %s): %s',
                                          t.attempts + 1, t.max_attempts, t.error_message)
                              ELSE t.error_message END,
                         t.error_terminal OR t.dead, t.finalizer, t.operation_output)::drain_item),
           bool_or(t.task_type = 'delete' AND t.error_message IS NULL),
           bool_or(t.task_type = 'operate'),
           bool_or(t.error_message IS NOT NULL OR t.conditions IS NOT NULL),
           array_agg(t.tid) FILTER (WHERE NOT t.retry OR t.dead),
           array_agg(t.tid) FILTER (WHERE t.retry AND NOT t.dead),
           array_agg(t.resource_id) FILTER (WHERE t.dead),
           array_agg(t.resource_id) FILTER (WHERE t.rerun AND (NOT t.retry OR t.dead))
      INTO v_pitems, v_pdels, v_pops, v_pconds, v_fin, v_rp, v_pdead, v_prerun
      FROM tgt t;
    -- Finish and re-pend by TID in statements of their own: tgt may have
    -- locked a row's newer version (a heartbeat that committed while it
    -- waited), which tgt's own snapshot cannot see — a delete by that TID
    -- beside it would touch nothing and leave the task leased until the
    -- reaper. A later statement's snapshot sees every version this
    -- transaction locked, and the locks keep the TIDs stable. The TIDs go
    -- through ARRAY(SELECT unnest(…)) so the planner cannot count them (a
    -- counted array costed a Seq Scan of the partition; see the pop). The
    -- shard range prunes to the one partition the TIDs belong to, but it is
    -- also an index condition on the partition's primary key, which spans
    -- the whole partition: under a queue's statistics taken while it was
    -- drained, the planner costed that walk of every key (8,000+ buffers in
    -- the teardown plan test) as cheap as the TID scan. With index and
    -- bitmap scans off for these two statements (and seq scans, as ever),
    -- only the TID scan is left; the settings are put back after them.
    IF v_fin IS NOT NULL OR v_rp IS NOT NULL THEN
        v_gucs := ARRAY[current_setting('enable_indexscan'), current_setting('enable_bitmapscan'),
                        current_setting('enable_seqscan')];
        PERFORM set_config('enable_indexscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
                set_config('enable_seqscan', 'off', true);
    END IF;
    IF v_fin IS NOT NULL THEN
        DELETE FROM work_queue w
         WHERE w.shard_id BETWEEN v_plo AND v_phi
           AND w.ctid = ANY (ARRAY(SELECT unnest(v_fin)));
    END IF;
    IF v_rp IS NOT NULL THEN
        UPDATE work_queue w
           SET attempts     = w.attempts + 1,
               not_before   = p_now + least(interval '5 minutes', interval '1 second' * power(2, least(w.attempts, 16))),
               worker_id    = NULL,
               claim_epoch  = NULL,
               leased_at    = NULL,
               heartbeat_at = NULL
         WHERE w.shard_id BETWEEN v_plo AND v_phi
           AND w.ctid = ANY (ARRAY(SELECT unnest(v_rp)));
    END IF;
    IF v_fin IS NOT NULL OR v_rp IS NOT NULL THEN
        PERFORM set_config('enable_indexscan', v_gucs[1], true), set_config('enable_bitmapscan', v_gucs[2], true),
                set_config('enable_seqscan', v_gucs[3], true);
    END IF;
    IF v_pitems IS NOT NULL THEN
        v_items := v_items || v_pitems;
        v_dead := v_dead || coalesce(v_pdead, '{}');
        v_rerun := v_rerun || coalesce(v_prerun, '{}');
        v_dels := v_dels OR v_pdels;
        v_ops := v_ops OR v_pops;
        v_conds := v_conds OR v_pconds;
    END IF;
    END LOOP;
    IF cardinality(v_items) = 0 THEN
        RETURN v_n;
    END IF;

    -- 3. value flows; a dependent whose flowed value its schema refused
    --    (a pass the drainer re-runs with the refusals) drops its own
    --    reconcile result, which ran on the spec the refusal keeps
    v_subst := drain_value_flows(v_items, p_now);
    v_failed := nullif(current_setting('converge.value_flow_failed', true), '')::jsonb;
    IF v_failed IS NOT NULL THEN
        PERFORM set_config('converge.value_flow_failed', '', true);
        v_items := ARRAY(SELECT it FROM unnest(v_items) it
                          WHERE NOT (it.task_type = 'reconcile' AND v_failed ? it.resource_id::text));
    END IF;

    -- 4. apply: the coalesced status update (its statement triggers are the cascade)
    v_resched := drain_apply(v_items, p_now);

    -- 5. deletes
    PERFORM drain_finish_deletes(v_items, v_dels, p_now);

    -- 6. conditions, operations
    PERFORM drain_conditions(v_items, v_conds, p_now);
    IF cardinality(v_dead) > 0 THEN
        PERFORM drain_dead_letters(v_items, v_dead, p_now);
    END IF;
    IF v_ops THEN
        PERFORM drain_finish_operations(v_items, p_now);
    END IF;

    -- 7. re-gate: still lagging, and substituted dependents; and rollup
    --    roots whose finished lease was marked rerun (the subtree changed
    --    while it ran), through the gate in re-pend mode
    IF v_resched IS NOT NULL OR v_subst IS NOT NULL THEN
        PERFORM schedule_candidates(coalesce(v_resched, '{}') || coalesce(v_subst, '{}'), p_now, false);
    END IF;
    IF cardinality(v_rerun) > 0 THEN
        PERFORM schedule_candidates(v_rerun, p_now, true);
    END IF;

    -- 8. teardown: a row whose last finalizer was just stripped goes now,
    --    and the layer above advances (locked in step 1); a row that still
    --    holds a finalizer the task did not own is left to the reaper's
    --    sweep, at its pace, as before (re-queued here at once, a finalizer
    --    no Deleter strips would loop through the worker without a pause)
    IF v_dels THEN
        PERFORM teardown_advance(ARRAY(SELECT i.resource_id FROM unnest(v_items) i
                                        CROSS JOIN LATERAL (SELECT 1 FROM resources r
                                                             WHERE r.id = i.resource_id AND r.finalizers = '{}'
                                                            OFFSET 0) r
                                        WHERE i.task_type = 'delete' AND i.error_message IS NULL),
                                 0, 255, p_now, NULL);
    END IF;
    RETURN v_n;
END
$$;
