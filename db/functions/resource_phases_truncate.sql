-- resource_phases_truncate: a TRUNCATE of resources (no row triggers run)
-- empties the phase index with it, so no entry outlives its row.
CREATE OR REPLACE FUNCTION resource_phases_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE resource_phases;
    RETURN NULL;
END
$$;
