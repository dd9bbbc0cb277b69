-- reap_unlocked_cluster_members: the fast failure detector. Every member runs
-- it on a short timer (and on cluster_changed); it deletes the rows of
-- members that recorded a lock_key whose session advisory lock (classid
-- 20251201, objid lock_key) is no longer granted in this database: the
-- process crashed or its lock connection died, so its backend is gone. Each
-- removed row fires cluster_changed through the row-level trigger, so every
-- member re-tiles at once. A member that is alive but lost its lock has
-- already stopped claiming (it watches its own lock connection with a
-- deadline shorter than the server's keepalive); it re-inserts its row when
-- it holds the lock again. The idle tick is one read of pg_locks and one
-- index probe; the DELETE runs only when a row qualifies. The DELETE takes
-- the lock itself (a transaction-level try-lock on the same key) before it
-- removes a row: the owner takes its lock before it writes its row, so a
-- member that re-acquired its lock a moment ago keeps its row, and one that
-- re-acquires while this runs waits for the commit and re-inserts after it.
-- Returns the ids removed.
CREATE OR REPLACE FUNCTION reap_unlocked_cluster_members()
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    v_held bigint[];
BEGIN
    SELECT coalesce(array_agg(l.objid::bigint), '{}') INTO v_held
      FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
       AND l.classid = 20251201::oid
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database());
    IF NOT EXISTS (SELECT 1 FROM cluster_members m
                    WHERE m.lock_key IS NOT NULL AND m.lock_key <> ALL (v_held)) THEN
        RETURN;
    END IF;
    RETURN QUERY
    DELETE FROM cluster_members m
     WHERE m.lock_key IS NOT NULL AND m.lock_key <> ALL (v_held)
       AND pg_try_advisory_xact_lock(20251201, m.lock_key::int)
    RETURNING m.member_id;
    IF FOUND THEN
        -- Ungated, on top of the trigger's gated wake: a removal is rare, and
        -- its wake must not be coalesced away by a join a moment earlier.
        PERFORM pg_notify('cluster_changed', '');
    END IF;
END
$$;
