-- resource_deps_truncate: a TRUNCATE of resources (no row or statement
-- delete triggers run) empties the edges with it, as the foreign keys'
-- TRUNCATE … CASCADE did, so no edge outlives its ends.
CREATE OR REPLACE FUNCTION resource_deps_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE resource_deps;
    RETURN NULL;
END
$$;
