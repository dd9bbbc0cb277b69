-- sweep_deletable: the reaper's backstop for teardowns in [p_lo, p_hi]. A
-- delete is advanced by events — request_resource_deletion queues the
-- marked tree's first teardowns, and the drain, as each teardown succeeds,
-- removes the row and advances the layer above (teardown_advance) — so this
-- pass finds work only where an event could not act: a row another
-- transaction held (SKIP LOCKED), the layer above a finalizer-free row that
-- went in a drain, a teardown a crash interrupted. It hands the marked rows
-- of a bounded walk to teardown_advance, which advances each unblocked one
-- (queues its teardown task, or removes it and moves up), at most p_max.
-- The walk reads at most 20 × p_max marked rows — their resource_phases
-- entries, phase Deleting, by idx_resource_phases_deleting (on resources
-- the mark's column is in no index, so a mark is a heap-only update) —
-- from a random shard of the range onwards, wrapping around: a teardown of a
-- million rows is mostly rows still blocked or with their task queued, and
-- reading them all on every tick would cost the reaper seconds; each tick
-- reads a window instead, and a large marked set is covered over ticks.
-- Bitmap scans are off with the seq scans: read unordered, then sorted, the
-- window would read every marked row of the range first (a plan made
-- without statistics chose it).
-- Strict wait: a row whose teardown never finishes keeps its finalizer and
-- blocks its owners and dependencies forever (no dead-letter unblock),
-- surfacing the stuck row instead of orphaning infrastructure. (A dependency
-- cycle among marked rows never unblocks either; composers emit DAGs.)
-- Idle gate: idx_resource_phases_deleting (empty in steady state).
-- Returns the number of rows advanced (tasks enqueued + rows deleted).
-- Seq scans are off: a session keeps the generic plan it made on its first
-- calls, on a fresh install's empty tables, where a scan is the cheap plan;
-- kept while a bulk apply grows the table, it would read it whole on every
-- tick until an ANALYZE (TestPlans_ReaperSessionPlannedOnEmptyTables).
CREATE OR REPLACE FUNCTION sweep_deletable(p_lo int, p_hi int, p_max int, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET enable_seqscan = off SET enable_bitmapscan = off AS $$
DECLARE
    v_walk  int := 20 * greatest(p_max, 1);
    v_start int;
    v_ids   uuid[];
BEGIN
    IF p_max <= 0 OR NOT EXISTS (SELECT 1 FROM resource_phases
                                  WHERE phase = 'Deleting' AND shard_id BETWEEN p_lo AND p_hi) THEN
        RETURN 0;
    END IF;
    v_start := p_lo + floor(random() * (p_hi - p_lo + 1))::int;
    v_ids := ARRAY(
        SELECT w.id FROM (
            (SELECT p.id FROM resource_phases p
              WHERE p.phase = 'Deleting' AND p.shard_id BETWEEN v_start AND p_hi
              ORDER BY p.shard_id LIMIT v_walk)
            UNION ALL
            (SELECT p.id FROM resource_phases p
              WHERE p.phase = 'Deleting' AND p.shard_id BETWEEN p_lo AND v_start - 1
              ORDER BY p.shard_id LIMIT v_walk)) w
        LIMIT v_walk);
    RETURN teardown_advance(v_ids, p_lo, p_hi, p_now, p_max);
END
$$;
