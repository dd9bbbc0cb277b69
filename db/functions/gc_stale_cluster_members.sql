-- gc_stale_cluster_members: UI/history cleanup, not a routing signal (routing
-- drops a member after the much shorter liveness window). Hard-deletes rows
-- whose heartbeat is older than p_ttl: members that crashed or whose
-- deregister timed out. An idle tick is one read (the DELETE runs only when a
-- row qualifies); each removed row fires cluster_changed through the
-- row-level trigger, so the role re-tiles. Returns the number removed.
-- A removed row that carries an admin's drain or kill (control, control_by,
-- control_at) leaves it on the id's tombstone, as the dead-member probe
-- (reap_unlocked_cluster_members) does: a member whose beats failed past the
-- TTL while its process lived on re-inserts its row on its next beat and
-- takes the request back (membership.Upsert); the admin was told it was
-- recorded. A row without a request leaves no tombstone: the probe frees the
-- leases of a freshly tombstoned id, and a member the GC removed is left to
-- the stale-lease reaper as before. Tombstones older than ten minutes are
-- deleted whenever one is written, as the probe does.
CREATE OR REPLACE FUNCTION gc_stale_cluster_members(p_ttl interval DEFAULT interval '5 minutes', p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n   int;
    v_ids text[];
    v_ctl text[];
    v_by  text[];
    v_at  timestamptz[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cluster_members WHERE last_heartbeat < p_now - p_ttl) THEN
        RETURN 0;
    END IF;
    WITH gone AS (
        DELETE FROM cluster_members WHERE last_heartbeat < p_now - p_ttl
        RETURNING member_id, control, control_by, control_at
    )
    SELECT count(*)::int,
           array_agg(member_id) FILTER (WHERE control IS NOT NULL),
           array_agg(control) FILTER (WHERE control IS NOT NULL),
           array_agg(control_by) FILTER (WHERE control IS NOT NULL),
           array_agg(control_at) FILTER (WHERE control IS NOT NULL)
      INTO v_n, v_ids, v_ctl, v_by, v_at
      FROM gone;
    IF v_ids IS NOT NULL THEN
        BEGIN
            INSERT INTO cluster_member_tombstones AS t (member_id, control, control_by, control_at)
            SELECT * FROM unnest(v_ids, v_ctl, v_by, v_at)
            ON CONFLICT (member_id) DO UPDATE
               SET removed_at = now(), control = EXCLUDED.control,
                   control_by = EXCLUDED.control_by, control_at = EXCLUDED.control_at;
            DELETE FROM cluster_member_tombstones WHERE removed_at < now() - interval '10 minutes';
        EXCEPTION WHEN undefined_column THEN
            -- The schema before migration 00020 (this function set is applied
            -- before the migrations): the tombstone keeps no request.
            NULL;
        END;
    END IF;
    RETURN v_n;
END
$$;
