-- quarantine_resource: the operator set-aside. frozen_until = 'infinity'
-- (phase Quarantined) freezes the row from every scheduler and substitute
-- pass (they all gate on frozen_until IS NULL), and the reaper never sweeps
-- it ('infinity' is never < now). Drops a pending RECONCILE task — never a
-- delete task: quarantine must not interfere with teardown. Its root is
-- re-offered to schedule_eligible, since the frozen child no longer holds the
-- root's rollup back. Returns false when the row does not exist.
CREATE OR REPLACE FUNCTION quarantine_resource(p_id uuid)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_shard int;
    v_root  uuid;
BEGIN
    UPDATE resources SET frozen_until = 'infinity' WHERE id = p_id
    RETURNING shard_id, root_id INTO v_shard, v_root;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM work_queue
     WHERE shard_id BETWEEN v_shard AND v_shard
       AND resource_id = p_id AND task_type = 'reconcile' AND worker_id IS NULL;
    IF v_root IS NOT NULL THEN
        PERFORM schedule_eligible(ARRAY[v_root]);
    END IF;
    RETURN true;
END
$$;
