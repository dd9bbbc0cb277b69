-- resources_id_fixed: a resource's id never changes (BEFORE UPDATE OF id …
-- FOR EACH ROW, only when it would). Owned children and edges reference
-- it, checked when they are written (resources_owner_check,
-- resource_deps_check) and removed with it (resources_cascade_delete); an
-- id that moved would leave them pointing at nothing. No writer sets it.
CREATE OR REPLACE FUNCTION resources_id_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the id of resource %/% cannot change (from % to %)', OLD.kind, OLD.name, OLD.id, NEW.id
        USING ERRCODE = 'check_violation', TABLE = 'resources', COLUMN = 'id';
END
$$;
