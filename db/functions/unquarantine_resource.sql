-- unquarantine_resource: lifts a quarantine (only 'infinity'; an orphan's
-- finite deadline is the composer's business) and re-arms the row through
-- schedule_eligible, so a spec edited while quarantined reconciles now.
-- Returns false when the row does not exist.
CREATE OR REPLACE FUNCTION unquarantine_resource(p_id uuid)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE resources SET frozen_until = NULL WHERE id = p_id AND frozen_until = 'infinity';
    IF NOT FOUND THEN
        RETURN EXISTS (SELECT 1 FROM resources WHERE id = p_id);
    END IF;
    PERFORM schedule_eligible(ARRAY[p_id]);
    RETURN true;
END
$$;
