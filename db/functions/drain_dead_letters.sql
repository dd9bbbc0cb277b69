-- drain_dead_letters: step 6 of drain_outbox_range, for the reconciles the
-- fence dead-lettered (p_dead: their transient failure was the kind's
-- max_transient_attempts-th in a row, so they were finished as terminal
-- failures instead of re-pended). Their Synced condition, which
-- drain_conditions just wrote as ReconcileError, becomes reason DeadLettered
-- (the message says how many attempts and the last error), and each gets one
-- Warning DeadLettered event. A spec edit bumps generation, which resets the
-- attempts and lets it retry. p_items is the fenced batch, drain_item[]
-- (anyarray: the function set is created before the schema's types exist).
-- It holds one reconcile item a resource (the fence keeps one result a task,
-- the one its queue row's claim still matches, and a resource has one
-- reconcile task); should it ever hold more, the newest generation's is the
-- dead letter, not whichever the sort met first.
CREATE OR REPLACE FUNCTION drain_dead_letters(p_items anyarray, p_dead uuid[], p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    WITH d AS (
        SELECT DISTINCT ON (i.resource_id) i.resource_id, i.generation, left(i.error_message, 4096) AS message
          FROM unnest(p_items) i
         WHERE i.task_type = 'reconcile' AND i.resource_id = ANY (p_dead) AND i.error_message IS NOT NULL
         ORDER BY i.resource_id, i.generation DESC
    ), cond AS (
        INSERT INTO resource_conditions AS c (resource_id, type, status, reason, message, observed_generation,
                                              last_transition_time)
        SELECT d.resource_id, 'Synced', 'False', 'DeadLettered', d.message, d.generation, p_now FROM d
        ON CONFLICT (resource_id, type) DO UPDATE
           SET status               = EXCLUDED.status,
               reason               = EXCLUDED.reason,
               message              = EXCLUDED.message,
               observed_generation  = EXCLUDED.observed_generation,
               last_transition_time = CASE WHEN c.status IS DISTINCT FROM EXCLUDED.status
                                           THEN EXCLUDED.last_transition_time ELSE c.last_transition_time END
    )
    INSERT INTO resource_events (resource_id, type, reason, message, created_at)
    SELECT d.resource_id, 'Warning', 'DeadLettered', d.message, p_now FROM d;
END
$$;
