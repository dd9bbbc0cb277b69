-- rewalk_rollups: the crash catch-up's part for composites' rollups.
-- A crash restart of Postgres (or a failover to a standby) empties the
-- UNLOGGED queue. requeue_failed_and_pending rebuilds what the durable
-- columns say is owed — a row lagging its spec, an open operation — but a
-- synced composite (Ready, Degraded, or Failed on a retryable rollup) whose
-- rollup was queued because a descendant settled, recovered or flipped
-- health owes it in no column, and would keep a status and phase that do
-- not reflect its children until something else touched it. Nothing on the
-- hot path records such a debt (a logged write per child change); instead,
-- after a crash, every owner is sent through the rollup re-pend once
-- (schedule_candidates with p_repend: idempotent, coalesced with any rollup
-- already queued, and still held back while a descendant progresses — its
-- settle pends the rollup then).
--
-- The crash is told by the sentinel rollup_rewalk: UNLOGGED, its one row is
-- gone after crash recovery. The caller that finds it gone puts it back with
-- started_at set and a position per slice of the owner-id space in
-- rollup_rewalk_cursors (256 slices by the id's first byte, numbered like
-- the shards: a reaper walks the slices of its range); ON CONFLICT makes one
-- caller the walk's starter (started). Each call then walks at most p_max
-- owners over its range's slices, lowest first, a share of p_max each: the
-- distinct owner_id values of idx_resources_owner from the slice's
-- position, one index descent an owner however many children it has (a
-- loose index scan). It pends their rollups and moves the positions on; a
-- slice walked to its end loses its row. The call that finds no row left
-- ends the walk (finished, with its totals): the sentinel's row lock orders
-- the finishing calls, and each checks for rows left in a statement after
-- taking it, so exactly one sees none. A crash during the walk empties both tables: the walk starts over.
-- Slices held by another caller (two reapers over a range during a re-tile)
-- are skipped, not waited for.
-- With no crash since the last walk a call is one read of the sentinel's
-- one row. Seq scans are off: every step is an index probe, and a plan a
-- session made on a fresh install's empty tables must not read resources
-- whole for each owner once the fleet has grown. Returns what this call did, and for the starting and finishing
-- calls what the walk did.
CREATE OR REPLACE FUNCTION rewalk_rollups(p_lo int, p_hi int, p_max int, p_now timestamptz DEFAULT now(),
                                          OUT started boolean, OUT walked int, OUT pended int, OUT finished boolean,
                                          OUT walk_started_at timestamptz, OUT walked_total bigint,
                                          OUT pended_total bigint)
LANGUAGE plpgsql SET jit = off SET enable_seqscan = off AS $$
DECLARE
    v_slices int;
    v_budget int;
    v_take   int;
    v_cur    record;
    v_lo     uuid;
    v_hi     uuid;
    v_first  uuid;
    v_walk   uuid[];
    v_ids    uuid[] := '{}';
BEGIN
    started := false;
    walked := 0;
    pended := 0;
    finished := false;
    SELECT w.started_at INTO walk_started_at FROM rollup_rewalk w;
    IF FOUND AND walk_started_at IS NULL THEN
        RETURN; -- no crash since the last walk
    END IF;
    IF NOT FOUND THEN
        -- Crash recovery emptied the sentinel: the walk starts, once.
        INSERT INTO rollup_rewalk (one, started_at) VALUES (true, p_now) ON CONFLICT (one) DO NOTHING;
        IF FOUND THEN
            DELETE FROM rollup_rewalk_cursors;
            INSERT INTO rollup_rewalk_cursors (slice) SELECT s FROM generate_series(0, 255) s;
            started := true;
        END IF;
    END IF;

    IF p_lo <= p_hi THEN
        SELECT count(*) INTO v_slices FROM rollup_rewalk_cursors c WHERE c.slice BETWEEN p_lo AND p_hi;
        v_budget := greatest(1, ceil(greatest(p_max, 1)::numeric / greatest(v_slices, 1))::int);
        FOR v_cur IN SELECT c.slice, c.after FROM rollup_rewalk_cursors c
                      WHERE c.slice BETWEEN p_lo AND p_hi ORDER BY c.slice FOR UPDATE SKIP LOCKED LOOP
            -- the slice's owner ids, both ends included
            v_lo := (lpad(to_hex(v_cur.slice), 2, '0') || '000000-0000-0000-0000-000000000000')::uuid;
            v_hi := (lpad(to_hex(v_cur.slice), 2, '0') || 'ffffff-ffff-ffff-ffff-ffffffffffff')::uuid;
            IF v_cur.after IS NULL THEN
                SELECT r.owner_id INTO v_first FROM resources r
                 WHERE r.owner_id BETWEEN v_lo AND v_hi ORDER BY r.owner_id LIMIT 1;
            ELSE
                SELECT r.owner_id INTO v_first FROM resources r
                 WHERE r.owner_id > v_cur.after AND r.owner_id <= v_hi ORDER BY r.owner_id LIMIT 1;
            END IF;
            -- the slice's share, within what the call has left
            v_take := least(v_budget, greatest(p_max, 1) - cardinality(v_ids));
            v_walk := NULL;
            IF v_first IS NOT NULL THEN
                WITH RECURSIVE w (id, n) AS (
                    SELECT v_first, 1
                    UNION ALL
                    SELECT (SELECT r.owner_id FROM resources r
                             WHERE r.owner_id > w.id AND r.owner_id <= v_hi ORDER BY r.owner_id LIMIT 1), w.n + 1
                      FROM w
                     WHERE w.id IS NOT NULL AND w.n < v_take
                )
                SELECT array_agg(w.id ORDER BY w.n) INTO v_walk FROM w WHERE w.id IS NOT NULL;
            END IF;
            IF coalesce(cardinality(v_walk), 0) < v_take THEN
                DELETE FROM rollup_rewalk_cursors c WHERE c.slice = v_cur.slice; -- walked to its end
            ELSE
                UPDATE rollup_rewalk_cursors c SET after = v_walk[cardinality(v_walk)] WHERE c.slice = v_cur.slice;
            END IF;
            v_ids := v_ids || coalesce(v_walk, '{}');
            EXIT WHEN cardinality(v_ids) >= greatest(p_max, 1);
        END LOOP;
    END IF;

    walked := cardinality(v_ids);
    IF walked > 0 THEN
        pended := schedule_candidates(v_ids, p_now, true);
    END IF;
    UPDATE rollup_rewalk w SET walked = w.walked + rewalk_rollups.walked, pended = w.pended + rewalk_rollups.pended
     WHERE w.started_at IS NOT NULL
    RETURNING w.started_at, w.walked, w.pended INTO walk_started_at, walked_total, pended_total;
    -- A statement of its own, after the row lock above: a caller that took
    -- the lock after another's commit sees the rows that one deleted.
    IF walk_started_at IS NOT NULL AND NOT EXISTS (SELECT 1 FROM rollup_rewalk_cursors) THEN
        UPDATE rollup_rewalk SET started_at = NULL, walked = 0, pended = 0;
        finished := true;
    END IF;
    IF NOT (started OR finished) THEN
        walk_started_at := NULL;
        walked_total := NULL;
        pended_total := NULL;
    END IF;
END
$$;
