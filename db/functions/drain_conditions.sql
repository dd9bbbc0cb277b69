-- drain_conditions: step 6 of drain_outbox_range. resource_conditions change
-- on transition only (last_transition_time moves only when status does, and
-- an unchanged condition is not written); a clean reconcile clears stored
-- False Synced/Ready conditions it does not report again (skipped while the
-- table is empty); a reconcile error is a Synced=False/ReconcileError
-- condition. A type a handler reported more than once in one result keeps
-- the last of them (the list reads as updates applied in turn). p_conds
-- says whether the batch carries any error or condition.
-- p_items is the fenced batch, drain_item[]: declared anyarray because the
-- function set is created before the schema's types exist (db/migrate), so a
-- signature cannot name one. Called once per batch, only by
-- drain_outbox_range, whose SET clauses (custom plans, no JIT) are in effect.
CREATE OR REPLACE FUNCTION drain_conditions(p_items anyarray, p_conds boolean, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM resource_conditions) THEN
        DELETE FROM resource_conditions c USING unnest(p_items) i
         WHERE i.task_type = 'reconcile' AND i.error_message IS NULL AND i.advance
           AND c.resource_id = i.resource_id AND c.type IN ('Synced', 'Ready') AND c.status = 'False'
           AND NOT coalesce(i.conditions @> jsonb_build_array(jsonb_build_object('type', c.type, 'status', 'False')), false);
    END IF;
    IF p_conds THEN
        INSERT INTO resource_conditions AS c (resource_id, type, status, reason, message, observed_generation, last_transition_time)
        SELECT DISTINCT ON (x.resource_id, x.type) x.resource_id, x.type, x.status, x.reason, x.message, x.generation, x.ltt
          FROM (SELECT i.resource_id, 'Synced' AS type, 'False' AS status, 'ReconcileError' AS reason,
                       left(i.error_message, 4096) AS message, i.generation, p_now AS ltt, 0::bigint AS ord
                  FROM unnest(p_items) i
                 WHERE i.task_type = 'reconcile' AND i.error_message IS NOT NULL
                UNION ALL
                SELECT i.resource_id, e.v->>'type', e.v->>'status', e.v->>'reason', e.v->>'message', i.generation, p_now,
                       e.ord
                  FROM unnest(p_items) i
                  CROSS JOIN LATERAL jsonb_array_elements(i.conditions) WITH ORDINALITY AS e(v, ord)
                 WHERE i.task_type = 'reconcile' AND i.error_message IS NULL AND jsonb_typeof(i.conditions) = 'array'
                   AND jsonb_typeof(e.v) = 'object' AND coalesce(e.v->>'type', '') <> ''
                   AND e.v->>'status' IN ('True', 'False', 'Unknown')) x
         ORDER BY x.resource_id, x.type, x.ord DESC
        ON CONFLICT (resource_id, type) DO UPDATE
           SET status               = EXCLUDED.status,
               reason               = EXCLUDED.reason,
               message              = EXCLUDED.message,
               observed_generation  = EXCLUDED.observed_generation,
               last_transition_time = CASE WHEN c.status IS DISTINCT FROM EXCLUDED.status
                                           THEN EXCLUDED.last_transition_time ELSE c.last_transition_time END
         WHERE (c.status, c.reason, c.message) IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message);
    END IF;
END
$$;
