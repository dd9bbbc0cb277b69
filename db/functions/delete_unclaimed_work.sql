-- delete_unclaimed_work: abandoned-work GC. Hard-deletes work_queue rows in
-- [p_lo, p_hi] that have been claimable (worker_id IS NULL) since before
-- p_now - p_after: work no worker ever picked up because its kind lost its
-- workers. Not abandonment: the resource stays lagging (or Failed for its
-- live spec, a synced row whose resync failed) and requeue_failed_and_pending
-- re-enqueues it if a worker ever returns (a delete task is re-enqueued by
-- sweep_deletable). Two kinds of row have no such
-- backstop, and are not dropped alone:
--   * an operate task: its operation is finished as Failed, the error naming
--     the window (SWEEPER_UNCLAIMED_DELETE_AFTER), in the same statement;
--     dropped alone, the operation stayed Pending for good;
--   * a synced composite's re-pended rollup (trigger childrenSettled on a
--     row with synced_gen >= generation) is kept: the catch-up re-enqueues
--     lagging rows only, so nothing would pend it again, and the composite
--     would keep what it rolled up before its children changed.
-- "Claimable since" is not_before
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
        SELECT q.shard_id, q.resource_id, q.task_type, q.op_id
          FROM work_queue q
         WHERE q.shard_id BETWEEN p_lo AND p_hi
           AND q.worker_id IS NULL
           AND q.not_before < p_now - p_after
           AND NOT (q.task_type = 'reconcile' AND q.trigger = 'childrenSettled'
                    AND EXISTS (SELECT 1 FROM resources r
                                 WHERE r.id = q.resource_id AND r.synced_gen >= r.generation))
         FOR UPDATE OF q SKIP LOCKED
    ), gone AS (
        DELETE FROM work_queue q
         USING doomed d
         WHERE q.shard_id BETWEEN p_lo AND p_hi
           AND q.shard_id = d.shard_id AND q.resource_id = d.resource_id
           AND q.task_type = d.task_type AND q.op_id = d.op_id
        RETURNING q.task_type, q.op_id
    ), refused AS (
        UPDATE resource_operations o
           SET state = 'Failed',
               error = format('no worker claimed the operation''s task within %s (SWEEPER_UNCLAIMED_DELETE_AFTER): '
                              'no worker served its kind', p_after),
               finished_at = p_now,
               updated_at = p_now
          FROM gone g
         WHERE g.task_type = 'operate' AND o.id = g.op_id AND o.state IN ('Pending', 'Running')
    )
    SELECT count(*) INTO v_n FROM gone;
    RETURN v_n;
END
$$;
