-- delete_unclaimed_work: abandoned-work GC. Hard-deletes work_queue rows in
-- [p_lo, p_hi] that have been claimable (worker_id IS NULL) since before
-- p_now - p_after: work no worker ever picked up because its kind lost its
-- workers. Not abandonment: the resource stays lagging and
-- requeue_failed_and_pending re-enqueues it if a worker ever returns (a delete
-- task is re-enqueued by sweep_deletable). "Claimable since" is not_before
-- (reap_stale_work resets it when it frees a lease, so a once-claimed row
-- restarts its clock). Idle gate: a LIMIT 1 probe of the pruned partitions'
-- pending rows (idx_work_queue_pending); SKIP LOCKED never waits on a claimer.
-- Seq scans are off: a session keeps the generic plan it made on its first
-- calls, on a fresh install's empty tables, where a scan is the cheap plan;
-- kept while a bulk apply grows the table, it would read it whole on every
-- tick until an ANALYZE (TestPlans_ReaperSessionPlannedOnEmptyTables).
CREATE OR REPLACE FUNCTION delete_unclaimed_work(p_lo int, p_hi int, p_after interval DEFAULT interval '24 hours',
                                      p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_n int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM work_queue
                    WHERE shard_id BETWEEN p_lo AND p_hi
                      AND worker_id IS NULL
                      AND not_before < p_now - p_after) THEN
        RETURN 0;
    END IF;
    WITH doomed AS (
        SELECT shard_id, resource_id, task_type, op_id
          FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi
           AND worker_id IS NULL
           AND not_before < p_now - p_after
         FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM work_queue q
         USING doomed d
         WHERE q.shard_id BETWEEN p_lo AND p_hi
           AND q.shard_id = d.shard_id AND q.resource_id = d.resource_id
           AND q.task_type = d.task_type AND q.op_id = d.op_id
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM gone;
    RETURN v_n;
END
$$;
