-- lease_lock: locks (FOR UPDATE) the work_queue rows of the given keys
-- (p_shards[i], p_ids[i], p_types[i], p_ops[i]) that worker p_worker holds
-- in shards [p_lo, p_hi] — a span inside one partition — and returns that
-- partition and the locked rows' TIDs, for a stamp that addresses them by
-- TID alone (lease_heartbeat, lease_release). One primary-key probe a key,
-- in the keys' order (the caller sorts them, so concurrent lockers take
-- rows in one order); a row updated and committed by another transaction
-- since this statement's snapshot is locked at its new version, whose TID
-- is the one returned, and the caller's next statement, on a fresh
-- snapshot, sees it. The locks are held to the caller's commit, so the
-- TIDs stay the rows'. Planned for each call with its arguments (the span
-- prunes to its partition when planning), with seq and bitmap scans off:
-- a probe a key is the plan whatever the queue's statistics say.
CREATE OR REPLACE FUNCTION lease_lock(p_lo int, p_hi int, p_shards int[], p_ids uuid[], p_types text[], p_ops uuid[],
                                      p_worker text, OUT part regclass, OUT tids tid[])
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_custom_plan SET enable_seqscan = off SET enable_bitmapscan = off SET jit = off AS $$
BEGIN
    SELECT min(w.tableoid)::regclass, array_agg(w.ctid) INTO part, tids
      FROM unnest(p_shards, p_ids, p_types, p_ops) AS k(shard_id, resource_id, task_type, op_id)
     CROSS JOIN LATERAL (
         SELECT w.tableoid, w.ctid FROM work_queue w
          WHERE w.shard_id BETWEEN p_lo AND p_hi
            AND w.shard_id = k.shard_id AND w.resource_id = k.resource_id
            AND w.task_type = k.task_type AND w.op_id = k.op_id AND w.worker_id = p_worker
            FOR UPDATE) w;
END
$$;
