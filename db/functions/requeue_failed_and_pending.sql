-- requeue_failed_and_pending: the reaper backstop for lagging rows.
--
-- Gates: rows in [p_lo, p_hi] whose spec is ahead of what was reconciled
-- (synced_gen < generation; walked through idx_resource_phases_lagging — the
-- phase index's Reconciling and Failed rows, empty in steady state, so the
-- scan is its own idle gate), untouched for p_retry_after (a failed
-- reconcile is retried only after its window), with no reconcile row in the
-- queue (the queue is UNLOGGED: after a crash this rebuilds it). Skips
-- terminally failed rows (failure_terminal AND failure_gen = generation: they
-- stop retrying until a spec edit bumps generation), frozen rows (orphaned or
-- quarantined) and deleting rows. The survivors go through schedule_eligible,
-- the one gate: upstreams must be synced, and a rollup root waits only for
-- still-progressing descendants (a failed descendant does not hold it back).
--
-- Bounded work per tick, a plan that cannot go quadratic: shard by shard (a
-- LATERAL per shard of the range) walk at most v_budget entries of
-- idx_resource_phases_lagging oldest first (since: entered the phase, or last
-- re-pended here), and test each for a queue row with one
-- primary-key probe of its own partition (every column of the queue's key is
-- bound; the LIMIT 1 keeps each probe a probe, where a NOT EXISTS may be
-- planned as a hash anti-join over the queue). The oldest p_max survivors
-- across the range go through schedule_eligible. A lagging row that already
-- has its task is exactly what a big backlog is full of, so the walk is what
-- bounds a tick: at most (hi - lo + 1) × v_budget probes, only in shards that
-- lag. Plans are custom per call (current statistics, the real range).
-- Returns how many reconcile tasks schedule_eligible enqueued.
CREATE OR REPLACE FUNCTION requeue_failed_and_pending(p_lo int, p_hi int, p_max int, p_retry_after interval,
                                                      p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan SET jit = off AS $$
DECLARE
    v_ids    uuid[];
    v_n      int;
    -- entries of idx_resource_phases_lagging examined per shard per call
    v_budget int := greatest(p_max, 64);
BEGIN
    SELECT array_agg(c.id ORDER BY c.updated_at) INTO v_ids
      FROM (SELECT w.id, w.updated_at
              FROM generate_series(p_lo, p_hi) AS s(shard)
             CROSS JOIN LATERAL (
                    SELECT p.id, p.shard_id
                      FROM resource_phases p
                     WHERE p.shard_id = s.shard
                       AND p.phase IN ('Reconciling', 'Failed')
                       AND p.since < p_now - p_retry_after
                     ORDER BY p.since
                     LIMIT v_budget) l
             CROSS JOIN LATERAL (
                    SELECT r.id, r.updated_at
                      FROM resources r
                     WHERE r.id = l.id
                       AND r.synced_gen < r.generation
                       AND r.updated_at < p_now - p_retry_after
                       AND r.frozen_until IS NULL
                       AND r.deletion_requested_at IS NULL
                       AND NOT (r.failure_terminal AND r.failure_gen = r.generation)
                    OFFSET 0) w
              LEFT JOIN LATERAL (
                    SELECT true AS queued
                      FROM work_queue q
                     WHERE q.shard_id BETWEEN p_lo AND p_hi
                       AND q.shard_id = l.shard_id AND q.resource_id = l.id
                       AND q.task_type = 'reconcile'
                       AND q.op_id = '00000000-0000-0000-0000-000000000000'
                     LIMIT 1) q ON true
             WHERE q.queued IS NULL
             ORDER BY w.updated_at
             LIMIT p_max) c;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    v_n := coalesce(schedule_eligible(v_ids, p_now), 0);
    -- To the back of the walk's line: a row that keeps failing is retried
    -- once per window and never holds the budget against younger rows.
    -- Last, and SKIP LOCKED: this transaction never waits once it holds a
    -- phase entry a drainer may be waiting for (a drainer holds its resources
    -- rows while its trigger rewrites their entries, so taking entries before
    -- schedule_eligible — which can wait on those rows — deadlocked). An entry
    -- a drainer is rewriting gets a fresh since from it anyway.
    UPDATE resource_phases p SET since = p_now
     WHERE p.id IN (SELECT l.id FROM resource_phases l WHERE l.id = ANY (v_ids)
                     ORDER BY l.id FOR UPDATE SKIP LOCKED);
    RETURN v_n;
END
$$;
