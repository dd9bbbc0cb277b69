-- drain_finish_deletes: step 5 of drain_outbox_range. A successful delete
-- task strips its finalizer (the task's, else the kind's; step 8,
-- teardown_advance, then removes the row); a failed one records a
-- DeleteFailed event on its first attempt. p_dels says whether the batch holds a successful delete at all.
-- p_items is the fenced batch, drain_item[]: declared anyarray because the
-- function set is created before the schema's types exist (db/migrate), so a
-- signature cannot name one. Called once per batch, only by
-- drain_outbox_range, whose SET clauses (custom plans, no JIT) are in effect.
--
-- The finalizer's strip compares its key as "r.id = ANY (ARRAY[d.resource_id])",
-- with seq scans off, as drain_apply does: the loop over the batch probing
-- the primary key is the only plan without a disabled node. As
-- "r.id = d.resource_id", a resources table analyzed while empty (a fleet
-- torn down, another applied) looked empty however much it held, and every
-- row of the batch walked the whole primary key: 680,000 buffers for 90
-- deletes in a 10k fleet (TestPlans_TeardownUnderEmptiedQueueStatistics,
-- "emptied fleet").
CREATE OR REPLACE FUNCTION drain_finish_deletes(p_items anyarray, p_dels boolean, p_now timestamptz) RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off AS $$
BEGIN
    IF p_dels THEN
        UPDATE resources r
           SET finalizers = coalesce(ARRAY(SELECT f FROM unnest(r.finalizers) f
                                            WHERE f IS DISTINCT FROM coalesce(d.finalizer, kc.finalizer_name)), '{}'),
               updated_at = p_now
          FROM unnest(p_items) d
          LEFT JOIN kind_config kc ON kc.kind = d.kind AND kc.version = d.version
         WHERE d.task_type = 'delete' AND d.error_message IS NULL AND r.id = ANY (ARRAY[d.resource_id])
           AND coalesce(d.finalizer, kc.finalizer_name) = ANY (r.finalizers);
    END IF;
    INSERT INTO resource_events (resource_id, type, reason, message, created_at)
    SELECT i.resource_id, 'Warning', 'DeleteFailed', left(i.error_message, 4096), p_now
      FROM unnest(p_items) i
     WHERE i.task_type = 'delete' AND i.error_message IS NOT NULL AND i.attempts = 0;
END
$$;
