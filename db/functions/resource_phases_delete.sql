-- resource_phases_delete: deleted resources leave the phase index. AFTER
-- DELETE … FOR EACH STATEMENT (a cascade of the owner FK fires it once per
-- cascading statement). By primary key, for the reason resource_phases_update
-- gives.
CREATE OR REPLACE FUNCTION resource_phases_delete() RETURNS trigger
LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    DELETE FROM resource_phases s WHERE s.id = ANY (ARRAY(SELECT o.id FROM old_rows o));
    RETURN NULL;
END
$$;
