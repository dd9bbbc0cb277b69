-- announce_cap: the most rows one statement announces id by id.
CREATE OR REPLACE FUNCTION announce_cap() RETURNS int
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 4000 $$;
