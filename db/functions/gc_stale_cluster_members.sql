-- gc_stale_cluster_members: UI/history cleanup, not a routing signal (routing
-- drops a member after the much shorter liveness window). Hard-deletes rows
-- whose heartbeat is older than p_ttl: members that crashed or whose
-- deregister timed out. An idle tick is one read (the DELETE runs only when a
-- row qualifies); each removed row fires cluster_changed through the
-- row-level trigger, so the role re-tiles. Returns the number removed.
CREATE OR REPLACE FUNCTION gc_stale_cluster_members(p_ttl interval DEFAULT interval '5 minutes', p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cluster_members WHERE last_heartbeat < p_now - p_ttl) THEN
        RETURN 0;
    END IF;
    DELETE FROM cluster_members WHERE last_heartbeat < p_now - p_ttl;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
