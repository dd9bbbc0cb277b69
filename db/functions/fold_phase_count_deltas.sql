-- fold_phase_count_deltas moves up to p_max pending deltas (oldest first) into
-- resource_phase_counts (per kind, version and phase) and drops counts that
-- reached zero. One folder at a time (a non-blocking advisory lock); returns the number of deltas folded (0
-- when another folder holds the lock).
CREATE OR REPLACE FUNCTION fold_phase_count_deltas(p_max int DEFAULT 100000) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('fold_phase_count_deltas')) THEN
        RETURN 0;
    END IF;
    WITH batch AS (
        DELETE FROM resource_phase_deltas
         WHERE id IN (SELECT id FROM resource_phase_deltas ORDER BY id LIMIT p_max)
        RETURNING kind, version, phase, dn
    ), agg AS (
        SELECT kind, version, phase, sum(dn) AS dn, count(*) AS rows FROM batch GROUP BY kind, version, phase
    ), up AS (
        INSERT INTO resource_phase_counts AS c (kind, version, phase, n)
        SELECT kind, version, phase, dn FROM agg ORDER BY kind, version, phase
        ON CONFLICT (kind, version, phase) DO UPDATE SET n = c.n + EXCLUDED.n
    )
    SELECT coalesce(sum(rows), 0) INTO v_n FROM agg;
    DELETE FROM resource_phase_counts WHERE n = 0;
    RETURN v_n;
END
$$;
