-- free_dead_member_leases: step of reap_unlocked_cluster_members, run on
-- every tick within a minute of a member's removal. Frees the work_queue
-- leases and lifecycle_outbox claims stamped with the removed ids p_gone
-- (a claim the dead process sent before it died can still commit after the
-- removal), skipping queue rows another transaction holds (SKIP LOCKED: the
-- next tick frees them); a claimed delivery its binding no longer selects
-- is deleted instead of freed. A freed queue row is claimable after a redelivery grace
-- of one second (not_before), and keeps its claim_epoch (see
-- reap_unlocked_cluster_members). Wakes work_ready and lifecycle_ready when
-- it freed something. Returns the number of queue leases freed.
-- Plans: every member runs this twice a second for a minute after each
-- crash, and a 1M fleet queues hundreds of thousands of pending rows, so it
-- reads only the leased ones: through the partial indexes of leased rows
-- (idx_work_queue_leased, idx_lifecycle_outbox_claimed), whose predicate the
-- worker_id filter implies, and the update probes each held row's primary
-- key. Seq scans, hash and merge joins are off here: with them, the plan
-- followed the statistics — on a partition of a few thousand rows it
-- scanned every pending row and hash-joined the update over a seq scan of
-- the whole queue (TestPlans_HotStatementsKeepTheirPlans). Plain index
-- scans are off too: with the queue's statistics taken while it was drained
-- (it looks empty), the update's loop ran the other way round — every
-- partition's primary key read whole, each row checked against the held
-- ones — which a seq-scan setting cannot stop; with both off, the probe a
-- held row (a bitmap scan of its partition's key) is the plan left, and the
-- leased rows are read by bitmap scans of their partial indexes.
CREATE OR REPLACE FUNCTION free_dead_member_leases(p_gone text[]) RETURNS int
LANGUAGE plpgsql SET jit = off SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET enable_indexscan = off AS $$
DECLARE
    v_n int;
    v_l int;
BEGIN
    IF p_gone IS NULL OR cardinality(p_gone) = 0 THEN
        RETURN 0;
    END IF;
    WITH held AS (
        SELECT shard_id, resource_id, task_type, op_id FROM work_queue
         WHERE worker_id IS NOT NULL AND worker_id = ANY (p_gone)
         FOR UPDATE SKIP LOCKED
    ), freed AS (
        UPDATE work_queue q
           SET worker_id = NULL, leased_at = NULL, heartbeat_at = NULL,
               not_before = now() + interval '1 second'
          FROM held h
         WHERE q.shard_id = h.shard_id AND q.resource_id = h.resource_id
           AND q.task_type = h.task_type AND q.op_id = h.op_id
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM freed;
    -- The wake restarts every dispatcher's idle backoff: its trailing sweeps
    -- (+25 ms, +75 ms, ... +1.6 s) take the rows once the grace is over.
    IF v_n > 0 THEN
        PERFORM pg_notify('work_ready', '');
    END IF;
    -- A delivery its binding no longer selects (lifecycle_selected) is
    -- deleted, not re-armed under the reactor the binding left.
    WITH held AS (
        SELECT l.shard_id, l.resource_id, l.transition, l.generation, l.binding_name,
               lifecycle_selected(l.binding_name, l.reactor, l.watch_kind, l.transition, l.snapshot) AS live
          FROM lifecycle_outbox l
         WHERE l.worker_id IS NOT NULL AND l.worker_id = ANY (p_gone)
         FOR UPDATE OF l
    ), freed AS (
        UPDATE lifecycle_outbox l
           SET worker_id = NULL, claim_epoch = NULL, heartbeat_at = NULL
          FROM held h
         WHERE h.live AND l.shard_id = h.shard_id AND l.resource_id = h.resource_id
           AND l.transition = h.transition AND l.generation = h.generation AND l.binding_name = h.binding_name
        RETURNING 1
    ), dropped AS (
        DELETE FROM lifecycle_outbox l
         USING held h
         WHERE NOT h.live AND l.shard_id = h.shard_id AND l.resource_id = h.resource_id
           AND l.transition = h.transition AND l.generation = h.generation AND l.binding_name = h.binding_name
    )
    SELECT count(*) INTO v_l FROM freed;
    IF v_l > 0 THEN
        PERFORM pg_notify('lifecycle_ready', '');
    END IF;
    RETURN v_n;
END
$$;
