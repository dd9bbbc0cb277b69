-- requeue_failed_and_pending: the reaper backstop for lagging and failed rows.
--
-- Gates: rows in [p_lo, p_hi] whose spec is ahead of what was reconciled
-- (synced_gen < generation), or that are Failed for their live spec while
-- synced (failure_gen = synced_gen = generation: a resync or a rollup of a
-- settled row that failed retryably, whose only retry was its own queue
-- row); walked through idx_resource_phases_lagging — the phase index's
-- Reconciling and Failed rows, empty in steady state, so the scan is its own
-- idle gate — untouched for p_retry_after (a failed reconcile is retried
-- only after its window), with no reconcile row in the queue (the queue is
-- UNLOGGED: after a crash this rebuilds it; the unclaimed-work GC may also
-- have dropped the row). Skips
-- terminally failed rows (failure_terminal AND failure_gen = generation: they
-- stop retrying until a spec edit bumps generation), frozen rows (orphaned or
-- quarantined) and deleting rows. The lagging survivors go through
-- schedule_eligible, the one gate: upstreams must be synced, and a rollup
-- root waits only for still-progressing descendants (a failed descendant
-- does not hold it back). The synced failed ones get a resync task again
-- (resync_enqueue, which passes no gate a settled row's resync does not;
-- without a recompose: one the lost task owed is still in composed_gen).
--
-- Bounded work per tick, a plan that cannot go quadratic, and a walk that
-- resumes: shard by shard (a LATERAL per shard of the range) walk at most
-- v_budget entries of idx_resource_phases_lagging in (since, id) order from
-- the shard's position in reaper_walk_cursors (since: entered the phase, or
-- last re-pended here), and test each for a queue row with one primary-key
-- probe of its own partition (every column of the queue's key is bound; the
-- LIMIT 1 keeps each probe a probe, where a NOT EXISTS may be planned as a
-- hash anti-join over the queue). The oldest p_max survivors across the
-- range go through schedule_eligible. The position then moves to the last
-- entry examined — or, when a survivor was left over by p_max, to the entry
-- before the first one left over, so it is examined again next tick — and a
-- shard whose walk reached its end starts again from its oldest entry. A
-- lagging row that already has its task is exactly what a big backlog is
-- full of; walking from the oldest entry every tick re-read that same front
-- and never reached a row without a task behind it. v_budget spreads about
-- 4 × p_max probes over the range's shards, so a tick's work is bounded by
-- p_max, not by the range's width or the backlog. Plans are custom per call
-- (current statistics, the real range), with seq scans off: every row it
-- touches is reached by key, and the stamp of a few hundred picked ids was
-- planned as a Seq Scan of resource_phases with the ids as a filter (seen
-- in a 200k bench run: 366 ms, every few ticks).
-- Operations: the open operations whose operate task the queue lost go
-- first (requeue_lost_operations: a Pending one's task queued again, a
-- Running one failed); the resources' columns say nothing of them.
-- Returns how many reconcile and operate tasks it enqueued.
CREATE OR REPLACE FUNCTION requeue_failed_and_pending(p_lo int, p_hi int, p_max int, p_retry_after interval,
                                                      p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan SET jit = off SET enable_seqscan = off AS $$
DECLARE
    v_ids    uuid[];
    v_lag    uuid[];
    v_resync uuid[];
    v_n      int;
    v_ops    int;
    -- entries of idx_resource_phases_lagging examined per shard per call
    v_budget int := greatest(8, ceil(4.0 * greatest(p_max, 1) / (p_hi - p_lo + 1))::int);
BEGIN
    IF p_lo > p_hi THEN
        RETURN 0;
    END IF;
    v_ops := requeue_lost_operations(p_lo, p_hi, p_max, p_now);
    WITH walk AS MATERIALIZED (
        SELECT s.shard, l.id, l.since, l.n, w.updated_at, w.synced,
               w.id IS NOT NULL AND q.queued IS NULL AS survivor
          FROM generate_series(p_lo, p_hi) AS s(shard)
          LEFT JOIN reaper_walk_cursors c ON c.shard_id = s.shard
         CROSS JOIN LATERAL (
                SELECT p.id, p.since, row_number() OVER (ORDER BY p.since, p.id) AS n
                  FROM (SELECT p.id, p.since
                          FROM resource_phases p
                         WHERE p.shard_id = s.shard
                           AND p.phase IN ('Reconciling', 'Failed')
                           AND p.since < p_now - p_retry_after
                           AND (p.since, p.id) > (coalesce(c.since, '-infinity'),
                                                  coalesce(c.id, '00000000-0000-0000-0000-000000000000'))
                         ORDER BY p.since, p.id
                         LIMIT v_budget) p) l
          LEFT JOIN LATERAL (
                SELECT r.id, r.updated_at, r.synced_gen >= r.generation AS synced
                  FROM resources r
                 WHERE r.id = l.id
                   AND (r.synced_gen < r.generation OR r.failure_gen = r.generation)
                   AND r.updated_at < p_now - p_retry_after
                   AND r.frozen_until IS NULL
                   AND r.deletion_requested_at IS NULL
                   AND NOT (r.failure_terminal AND r.failure_gen = r.generation)
                OFFSET 0) w ON true
          LEFT JOIN LATERAL (
                SELECT true AS queued
                  FROM work_queue q
                 WHERE w.id IS NOT NULL
                   AND q.shard_id BETWEEN p_lo AND p_hi
                   AND q.shard_id = s.shard AND q.resource_id = l.id
                   AND q.task_type = 'reconcile'
                   AND q.op_id = '00000000-0000-0000-0000-000000000000'
                 LIMIT 1) q ON true
    ), pick AS MATERIALIZED (
        SELECT wk.id, wk.updated_at, wk.synced FROM walk wk WHERE wk.survivor ORDER BY wk.updated_at LIMIT p_max
    ), marks AS MATERIALIZED (
        -- per shard: how far the walk went, and the first survivor p_max left over
        SELECT wk.shard, count(*) AS walked,
               min(wk.n) FILTER (WHERE wk.survivor AND NOT EXISTS (SELECT 1 FROM pick k WHERE k.id = wk.id)) AS first_cut
          FROM walk wk GROUP BY wk.shard
    ), ends AS (
        SELECT m.shard, wk.since, wk.id
          FROM marks m
          JOIN walk wk ON wk.shard = m.shard
                      AND wk.n = CASE WHEN m.first_cut IS NOT NULL THEN m.first_cut - 1
                                      WHEN m.walked >= v_budget THEN m.walked END
    ), advance AS (
        INSERT INTO reaper_walk_cursors AS c (shard_id, since, id)
        SELECT e.shard, e.since, e.id FROM ends e
        ON CONFLICT (shard_id) DO UPDATE SET since = EXCLUDED.since, id = EXCLUDED.id
    ), wrap AS (
        -- a shard walked to its end starts again from its oldest entry
        DELETE FROM reaper_walk_cursors c
         WHERE c.shard_id BETWEEN p_lo AND p_hi
           AND NOT EXISTS (SELECT 1 FROM marks m
                            WHERE m.shard = c.shard_id AND (m.first_cut IS NOT NULL OR m.walked >= v_budget))
    )
    SELECT array_agg(k.id ORDER BY k.updated_at),
           array_agg(k.id ORDER BY k.updated_at) FILTER (WHERE NOT k.synced),
           array_agg(k.id ORDER BY k.updated_at) FILTER (WHERE k.synced)
      INTO v_ids, v_lag, v_resync FROM pick k;
    IF v_ids IS NULL THEN
        RETURN v_ops;
    END IF;
    v_n := coalesce(schedule_eligible(v_lag, p_now), 0) + resync_enqueue(v_resync, false, p_now);
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
    RETURN v_n + v_ops;
END
$$;
