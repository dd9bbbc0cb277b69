-- lease_heartbeat: stamps heartbeat_at = p_now on the leases of the given
-- keys that worker p_worker holds in shards [p_lo, p_hi] (a span inside one
-- partition), so the reaper does not free them. Returns how many rows it
-- locked and how many it stamped (the same, now that the stamp runs on a
-- fresh snapshot; the store still re-runs a call that stamped fewer).
-- The rows are locked by key (lease_lock) and stamped by TID in their own
-- partition, which no index of it can answer: written as one statement over
-- work_queue, the stamp's `ctid = ANY (…) AND shard_id BETWEEN …` was read
-- by a walk of the primary key over the whole span whenever the partition's
-- statistics made it look empty (analyzed while drained), every row of the
-- partition on every heartbeat (TestPlans_HotStatementsKeepTheirPlans,
-- "leases").
CREATE OR REPLACE FUNCTION lease_heartbeat(p_lo int, p_hi int, p_shards int[], p_ids uuid[], p_types text[],
                                           p_ops uuid[], p_worker text, p_now timestamptz,
                                           OUT locked int, OUT changed int)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_part regclass;
    v_tids tid[];
BEGIN
    SELECT l.part, l.tids INTO v_part, v_tids FROM lease_lock(p_lo, p_hi, p_shards, p_ids, p_types, p_ops, p_worker) l;
    locked := coalesce(cardinality(v_tids), 0);
    changed := 0;
    IF locked > 0 THEN
        EXECUTE format('UPDATE %s w SET heartbeat_at = $1 WHERE w.ctid = ANY ($2)', v_part) USING p_now, v_tids;
        GET DIAGNOSTICS changed = ROW_COUNT;
    END IF;
END
$$;
