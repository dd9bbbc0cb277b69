-- resources_owner_recheck: a resource given a new owner (AFTER UPDATE OF
-- owner_id … FOR EACH ROW, only when the owner changed to another resource:
-- a compose re-adopting a child) is checked as resources_owner_check checks
-- an inserted one: the owner exists, and is locked FOR KEY SHARE. Status and
-- spec writes never SET owner_id, so the drain never runs it.
CREATE OR REPLACE FUNCTION resources_owner_recheck() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM resources r WHERE r.id = NEW.owner_id FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'insert or update on table "resources" violates foreign key constraint "resources_owner_id_fkey"'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'resources_owner_id_fkey', TABLE = 'resources',
                  DETAIL = format('Key (owner_id)=(%s) is not present in table "resources".', NEW.owner_id);
    END IF;
    RETURN NULL;
END
$$;
