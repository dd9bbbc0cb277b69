-- analyze_undersized: re-analyzes each of the fleet's tables whose
-- statistics size it at under a tenth of the live rows the server counts
-- for it (its n_live_tup, kept as rows are written), once it
-- holds p_min_rows or more. That is a table analyzed while empty — after a
-- fleet's teardown, before any VACUUM truncated its pages — and then filled
-- by the next fleet: Postgres sizes it at zero rows, however many it holds,
-- until its next ANALYZE, and autovacuum's may come minutes later while its
-- workers vacuum the teardown's dead rows (2¾–4¼ minutes for a million).
-- The hot statements are written so those statistics cannot flip their
-- plans (the plan tests' "emptied fleet" case); this shortens the window
-- for any statement they do not cover. Only tables the caller may analyze
-- (its role owns them, or it is a superuser), and never by waiting for a
-- lock (below). One caller at a time cluster-wide (a non-blocking advisory
-- lock: another member's call returns none). Returns the tables analyzed,
-- by name.
CREATE OR REPLACE FUNCTION analyze_undersized(p_min_rows bigint) RETURNS text[]
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    v_done text[] := '{}';
    v_t    record;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('analyze_undersized')) THEN
        RETURN v_done;
    END IF;
    -- five catalog rows and their counters (the pg_stat_all_tables view
    -- would group the whole catalog first)
    FOR v_t IN
        SELECT t.name, c.oid, s.live
          FROM unnest(ARRAY['resources', 'resource_phases', 'resource_labels', 'resource_deps', 'resource_events']) AS t(name)
          JOIN pg_class c ON c.oid = to_regclass(t.name)
         CROSS JOIN LATERAL (SELECT pg_stat_get_live_tuples(c.oid) AS live) s
         WHERE s.live >= p_min_rows
           AND c.reltuples >= 0                -- -1: never analyzed, sized by its pages
           AND c.reltuples * 10 < s.live
           AND pg_has_role(c.relowner, 'USAGE')
         ORDER BY t.name
    LOOP
        -- A table another session holds a lock on that ANALYZE's conflicts
        -- with — autovacuum's own pass over it, most often — is left for a
        -- later call: waiting for it would cancel that pass after
        -- deadlock_timeout, and autovacuum analyzes the table when its
        -- vacuum ends. SKIP_LOCKED covers a lock taken after the look (with
        -- a warning in the server's log).
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM pg_locks l
             WHERE l.locktype = 'relation' AND l.relation = v_t.oid
               AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
               AND l.pid <> pg_backend_pid()
               AND l.mode IN ('ShareUpdateExclusiveLock', 'ShareLock', 'ShareRowExclusiveLock',
                              'ExclusiveLock', 'AccessExclusiveLock'));
        EXECUTE format('ANALYZE (SKIP_LOCKED) %I', v_t.name);
        IF (SELECT c.reltuples * 10 >= v_t.live FROM pg_class c WHERE c.oid = v_t.oid) THEN
            v_done := v_done || v_t.name::text;
        END IF;
    END LOOP;
    RETURN v_done;
END
$$;
