-- drain_apply: step 4 of drain_outbox_range, the one coalesced resources
-- UPDATE for the batch's reconcile results, behind a no-op gate: status,
-- synced_gen (= the task generation when advance_synced_gen), health_ok,
-- failure_gen/failure_terminal (cleared on success, stamped on failure). Its
-- AFTER STATEMENT triggers are the cascade, so they run once per batch.
-- Events for failures (the first of a generation) and rollup phase changes —
-- never for a plain leaf success. Returns the resources still lagging after
-- it (moved on past the task's generation, a composite deferring its rollup,
-- a terminal failure of an older spec), for the re-gate.
-- p_items is the fenced batch, drain_item[]: declared anyarray because the
-- function set is created before the schema's types exist (db/migrate), so a
-- signature cannot name one. Called once per batch, only by
-- drain_outbox_range, whose SET clauses (custom plans, no JIT) are in effect.
--
-- per reads each row by its key, and the update writes the row per read,
-- by its TID ("r.ctid = p.tid": the rows are locked since drain_lock, so
-- the version per read is the one to update): a Tid Scan a row, where a
-- second probe of the key was a second descent of the primary key. With
-- seq scans off, the loop over the batch fetching each TID is the only plan
-- without a disabled node (TestPlans_HotStatementsKeepTheirPlans holds it
-- to that under every kind of statistics). As "r.id = p.id", a resources
-- table whose statistics were taken while it was empty (a fleet torn down
-- and analyzed, another applied) looked empty however much it held, and
-- the update's loop ran over its whole primary key, walked in order, each
-- entry checked against the batch: 13,000 buffers for a batch of 100 in a
-- 10k fleet ("emptied fleet").
CREATE OR REPLACE FUNCTION drain_apply(p_items anyarray, p_now timestamptz) RETURNS uuid[]
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_resched uuid[];
BEGIN
    WITH per AS (
        SELECT r.tid, r.id, r.phase AS old_phase, r.generation, r.failure_gen AS old_failure_gen,
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
          FROM unnest(p_items) i
          CROSS JOIN LATERAL (SELECT r.ctid AS tid, r.* FROM resources r WHERE r.id = i.resource_id OFFSET 0) r
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
         WHERE r.ctid = p.tid
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
    RETURN v_resched;
END
$$;
