-- resources_count_delete: deleted rows count -1 in their phase (see
-- resources_count_insert for the delta log).
CREATE OR REPLACE FUNCTION resources_count_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_phase_deltas (kind, version, phase, dn)
    SELECT kind, version, phase, -count(*) FROM old_rows GROUP BY kind, version, phase;
    RETURN NULL;
END
$$;
