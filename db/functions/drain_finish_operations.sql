-- drain_finish_operations: step 6 of drain_outbox_range, for operate tasks:
-- the resource_operations row still Pending or Running becomes Succeeded or
-- Failed, with the worker's output or error.
-- p_items is the fenced batch, drain_item[]: declared anyarray because the
-- function set is created before the schema's types exist (db/migrate), so a
-- signature cannot name one. Called once per batch, only by
-- drain_outbox_range, whose SET clauses (custom plans, no JIT) are in effect.
CREATE OR REPLACE FUNCTION drain_finish_operations(p_items anyarray, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE resource_operations op
       SET state       = CASE WHEN i.error_message IS NULL THEN 'Succeeded' ELSE 'Failed' END,
           output      = i.operation_output,
           error       = i.error_message,
           finished_at = p_now,
           updated_at  = p_now
      FROM unnest(p_items) i
     WHERE i.task_type = 'operate' AND op.id = i.op_id AND op.state IN ('Pending', 'Running');
END
$$;
