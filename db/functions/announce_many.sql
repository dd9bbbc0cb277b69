-- announce_many sends the "many" markers of a statement over the cap: one per
-- distinct kind, or a single 'm|' when there are more than 20 kinds.
CREATE OR REPLACE FUNCTION announce_many(p_kinds text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    k text;
BEGIN
    IF cardinality(p_kinds) > 20 THEN
        PERFORM pg_notify('resource_changed', 'm|');
        RETURN;
    END IF;
    FOREACH k IN ARRAY p_kinds LOOP
        PERFORM pg_notify('resource_changed', 'm|' || k);
    END LOOP;
END
$$;
