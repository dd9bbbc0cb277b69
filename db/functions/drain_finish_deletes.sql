-- drain_finish_deletes: step 5 of drain_outbox_range. A successful delete
-- task strips its finalizer (the task's, else the kind's; step 8,
-- teardown_advance, then removes the row); a failed one records a
-- DeleteFailed event on its first attempt. p_dels says whether the batch holds a successful delete at all.
-- p_items is the fenced batch, drain_item[]: declared anyarray because the
-- function set is created before the schema's types exist (db/migrate), so a
-- signature cannot name one. Called once per batch, only by
-- drain_outbox_range, whose SET clauses (custom plans, no JIT) are in effect.
CREATE OR REPLACE FUNCTION drain_finish_deletes(p_items anyarray, p_dels boolean, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_dels THEN
        UPDATE resources r
           SET finalizers = coalesce(ARRAY(SELECT f FROM unnest(r.finalizers) f
                                            WHERE f IS DISTINCT FROM coalesce(d.finalizer, kc.finalizer_name)), '{}'),
               updated_at = p_now
          FROM unnest(p_items) d
          LEFT JOIN kind_config kc ON kc.kind = d.kind AND kc.version = d.version
         WHERE d.task_type = 'delete' AND d.error_message IS NULL AND r.id = d.resource_id
           AND coalesce(d.finalizer, kc.finalizer_name) = ANY (r.finalizers);
    END IF;
    INSERT INTO resource_events (resource_id, type, reason, message, created_at)
    SELECT i.resource_id, 'Warning', 'DeleteFailed', left(i.error_message, 4096), p_now
      FROM unnest(p_items) i
     WHERE i.task_type = 'delete' AND i.error_message IS NOT NULL AND i.attempts = 0;
END
$$;
