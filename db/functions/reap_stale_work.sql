-- reap_stale_work: dead-worker recovery. A leased work_queue row in
-- [p_lo, p_hi] whose heartbeat (or, never beaten, its lease) is older than
-- p_stale_after belongs to a worker that died: free it (worker_id, lease,
-- heartbeat and claim_epoch cleared, claimable now) for re-claim. Clearing
-- claim_epoch fences the dead worker's late result out of the drain. The scan
-- reads only leased rows (idx_work_queue_leased) of the pruned partitions and
-- skips rows a claimer or the drain holds (SKIP LOCKED). Returns the number
-- freed; wakes the dispatchers when any.
-- Seq scans are off: a session keeps the generic plan it made on its first
-- calls, on a fresh install's empty tables, where a scan is the cheap plan;
-- kept while a bulk apply grows the table, it would read it whole on every
-- tick until an ANALYZE (TestPlans_ReaperSessionPlannedOnEmptyTables).
CREATE OR REPLACE FUNCTION reap_stale_work(p_lo int, p_hi int, p_stale_after interval, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_n int;
BEGIN
    WITH stale AS (
        SELECT shard_id, resource_id, task_type, op_id
          FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi
           AND worker_id IS NOT NULL
           AND coalesce(heartbeat_at, leased_at, '-infinity') < p_now - p_stale_after
         FOR UPDATE SKIP LOCKED
    ), freed AS (
        UPDATE work_queue q
           SET worker_id = NULL, claim_epoch = NULL, leased_at = NULL, heartbeat_at = NULL,
               not_before = p_now
          FROM stale s
         WHERE q.shard_id BETWEEN p_lo AND p_hi
           AND q.shard_id = s.shard_id AND q.resource_id = s.resource_id
           AND q.task_type = s.task_type AND q.op_id = s.op_id
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM freed;
    IF v_n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN v_n;
END
$$;
