-- lease_adopt: moves to worker p_worker the leases of the given keys in
-- shards [p_lo, p_hi] (a span inside one partition) that are still held
-- under the given claim_epochs (p_epochs[i]), by any claimer or none, and
-- stamps their heartbeat with p_now: a broker takes over the tasks a
-- reconnecting worker reports still running. Returns how many rows it
-- locked, and the keys adopted (one row with NULL keys when none was).
-- Rows locked by key, in the keys' order, and stamped by TID in their own
-- partition, for lease_heartbeat's reason; planned per call, with seq and
-- bitmap scans off, as lease_lock is.
CREATE OR REPLACE FUNCTION lease_adopt(p_lo int, p_hi int, p_shards int[], p_ids uuid[], p_types text[],
                                       p_ops uuid[], p_epochs bigint[], p_worker text, p_now timestamptz)
RETURNS TABLE (locked int, shard_id int, resource_id uuid, task_type text, op_id uuid)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_custom_plan SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
#variable_conflict use_column
DECLARE
    v_part regclass;
    v_tids tid[];
BEGIN
    SELECT min(w.tableoid)::regclass, array_agg(w.ctid) INTO v_part, v_tids
      FROM unnest(p_shards, p_ids, p_types, p_ops, p_epochs) AS k(shard_id, resource_id, task_type, op_id, epoch)
     CROSS JOIN LATERAL (
         SELECT w.tableoid, w.ctid FROM work_queue w
          WHERE w.shard_id BETWEEN p_lo AND p_hi
            AND w.shard_id = k.shard_id AND w.resource_id = k.resource_id
            AND w.task_type = k.task_type AND w.op_id = k.op_id AND w.claim_epoch = k.epoch
            FOR UPDATE) w;
    IF v_tids IS NULL THEN
        RETURN QUERY SELECT 0, NULL::int, NULL::uuid, NULL::text, NULL::uuid;
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format($sql$
        WITH a AS (
            UPDATE %s w SET worker_id = $1, heartbeat_at = $2 WHERE w.ctid = ANY ($4)
            RETURNING w.shard_id, w.resource_id, w.task_type, w.op_id
        )
        SELECT $3, a.shard_id, a.resource_id, a.task_type, a.op_id FROM (SELECT) one LEFT JOIN a ON true$sql$, v_part)
        USING p_worker, p_now, cardinality(v_tids), v_tids;
END
$$;
