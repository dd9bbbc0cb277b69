-- claim_span: the claim. Leases up to p_max pending, due tasks of one
-- (kind, version, task type) in shards [p_lo, p_hi] — a span inside one
-- work_queue partition (the store splits a wider range) — to worker
-- p_worker under one fresh claim_epoch, and returns each with the snapshot
-- of its resource. p_range_lo keys the claimer's own in-flight partial;
-- p_only_rollups claims the pair's due rollups alone.
--
-- The budget is p_max, or for a capped kind (kind_config.max_inflight > 0)
-- what claim_budget leaves of the cap; an uncapped kind skips the cap's
-- work. settled locks the pair's due rollups (trigger childrenSettled)
-- first, through idx_work_queue_settled, oldest first: a rollup finishes a
-- whole tree, and queued behind its kind's composes a root waited minutes
-- with every descendant READY. rest fills the batch with the pair's other
-- rows, the FOR UPDATE SKIP LOCKED walk of idx_work_queue_pending in its own
-- order (not_before), so the index returns the first rows at once; a row
-- settled skipped, locked by another claimer, stays skipped. Then one
-- statement stamps worker, lease, heartbeat and the epoch on exactly the
-- locked tuples by TID (stable: the locks are held to the commit), bumps a
-- capped kind's partial by the rows stamped, marks a claimed operation
-- Running, and returns the snapshots (a primary-key probe per row, LATERAL
-- … OFFSET 0).
--
-- Why a function: the queue's statistics are always stale, and one kind of
-- staleness no ANALYZE schedule avoids makes the planner see a partition as
-- empty whatever it holds. A partition analyzed while its rows were all
-- dead (the queue drained after a fleet's creation, the pages kept) records
-- no live rows over those pages, and Postgres sizes a relation by that
-- density times its current pages: zero rows, however many a rollout or a
-- teardown queues next, until that partition's next ANALYZE (in a 1M
-- rollout, three minutes). At zero rows every plan is free, and the claim,
-- a top-level statement, walked the primary key over the span's shards —
-- every row of the partition, leased or pending — once to find the rows to
-- lock and once more to stamp them. Here the locking statement runs with
-- seq scans, bitmap scans and sorts off, which leaves the ordered index walk
-- its one plan without a disabled node; and the stamp addresses the
-- partition itself (the locked rows' tableoid) with the TIDs alone, so no
-- index of it can stand in for the TID probe. TestPlans_HotStatementsKeepTheirPlans
-- holds both to that under such statistics ("emptied"). Each statement is
-- planned for its call with its arguments, as the claim was as a top-level
-- statement: the lock's plan prunes to the span's partition, and the stamp's
-- folds away the operations update of a non-operate claim.
CREATE OR REPLACE FUNCTION claim_span(p_kind text, p_version text, p_task_type text, p_max int,
                                      p_lo int, p_hi int, p_worker text, p_now timestamptz,
                                      p_range_lo int, p_only_rollups boolean)
RETURNS TABLE (shard_id int, resource_id uuid, task_type text, op_id uuid, claim_epoch bigint,
               task_generation bigint, trigger text, attempts int, provider_config jsonb,
               provider_bundle jsonb, deadline_secs int, kind text, version text, name text,
               labels jsonb, spec jsonb, status jsonb, generation bigint, composed_gen bigint,
               owner_id uuid, finalizers text[])
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_custom_plan SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_sort = off SET jit = off AS $fn$
#variable_conflict use_column
DECLARE
    v_cap      int;
    v_deadline int;
    v_n        int;
    v_part     regclass;
    v_tids     tid[];
BEGIN
    SELECT c.max_inflight, c.task_deadline_secs INTO v_cap, v_deadline
      FROM kind_config c WHERE c.kind = p_kind AND c.version = p_version;
    v_n := CASE WHEN coalesce(v_cap, 0) > 0 THEN claim_budget(p_kind, p_version, p_max) ELSE p_max END;

    WITH settled AS (
        SELECT w.tableoid, w.ctid
          FROM work_queue w
         WHERE w.kind = p_kind AND w.version = p_version AND w.task_type = p_task_type AND w.worker_id IS NULL
           AND w.trigger = 'childrenSettled'
           AND w.not_before <= p_now
           AND w.shard_id BETWEEN p_lo AND p_hi
         ORDER BY w.not_before
         LIMIT v_n
           FOR UPDATE SKIP LOCKED
    ), rest AS (
        SELECT w.tableoid, w.ctid
          FROM work_queue w
         WHERE w.kind = p_kind AND w.version = p_version AND w.task_type = p_task_type AND w.worker_id IS NULL
           AND w.trigger <> 'childrenSettled'
           AND w.not_before <= p_now
           AND w.shard_id BETWEEN p_lo AND p_hi
         ORDER BY w.not_before
         LIMIT CASE WHEN p_only_rollups THEN 0 ELSE greatest(v_n - (SELECT count(*) FROM settled), 0) END
           FOR UPDATE SKIP LOCKED
    )
    SELECT min(p.tableoid)::regclass, array_agg(p.ctid) INTO v_part, v_tids
      FROM (SELECT s.tableoid, s.ctid FROM settled s UNION ALL SELECT r.tableoid, r.ctid FROM rest r) p;
    IF v_tids IS NULL THEN
        RETURN;
    END IF;

    RETURN QUERY EXECUTE format($sql$
    WITH upd AS (
        UPDATE %s w
           SET worker_id = $1, leased_at = $2, heartbeat_at = $2, claim_epoch = $10, rerun = false
         WHERE w.ctid = ANY ($3)
        RETURNING w.shard_id, w.resource_id, w.task_type, w.op_id, w.claim_epoch, w.generation, w.trigger,
                  w.attempts, w.provider_config, w.provider_bundle
    ), bump AS (
        INSERT INTO kind_inflight AS k (kind, version, range_lo, in_flight)
        SELECT $4, $5, $6, count(*) FROM upd
         WHERE $7 > 0
        HAVING count(*) > 0
        ON CONFLICT (kind, version, range_lo) DO UPDATE SET in_flight = k.in_flight + EXCLUDED.in_flight
    ), ops AS (
        UPDATE resource_operations o SET state = 'Running', updated_at = $2
          FROM upd
         WHERE $8 = 'operate' AND o.id = upd.op_id AND o.state = 'Pending'
    )
    SELECT u.shard_id, u.resource_id, u.task_type, u.op_id, u.claim_epoch, u.generation, u.trigger, u.attempts,
           u.provider_config, u.provider_bundle, $9,
           r.kind, r.version, r.name, r.labels, r.spec, r.status, r.generation, r.composed_gen, r.owner_id, r.finalizers
      FROM upd u
     CROSS JOIN LATERAL (SELECT * FROM resources r WHERE r.id = u.resource_id OFFSET 0) r
    $sql$, v_part)
    USING p_worker, p_now, v_tids, p_kind, p_version, p_range_lo, coalesce(v_cap, 0), p_task_type, coalesce(v_deadline, 0),
          nextval('claim_epoch_seq');
END
$fn$;
