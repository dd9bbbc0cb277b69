-- announce_phase_code: the one-letter phase code of resource_changed payloads
-- (D Deleting, Q Quarantined, F Failed, O Orphaned, G Degraded, R Ready,
-- C Reconciling); see resources_announce for the payload grammar.
CREATE OR REPLACE FUNCTION announce_phase_code(p_phase text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE p_phase
        WHEN 'Deleting'    THEN 'D'
        WHEN 'Quarantined' THEN 'Q'
        WHEN 'Failed'      THEN 'F'
        WHEN 'Orphaned'    THEN 'O'
        WHEN 'Degraded'    THEN 'G'
        WHEN 'Ready'       THEN 'R'
        ELSE 'C'
    END
$$;
