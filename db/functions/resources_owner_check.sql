-- resources_owner_check: the owner reference of inserted resources, checked
-- once per statement (AFTER INSERT … FOR EACH STATEMENT) where a foreign key
-- checked it once per row. A compose inserts a root's children in one
-- statement, all with the same owner: the row-by-row check probed and locked
-- that owner once per child, 12 µs a leaf, about 5% of the database's CPU
-- in a run (docs/architecture.md, "References checked per statement").
--
-- Each distinct owner is locked FOR KEY SHARE, as the foreign key's check
-- locked it: a concurrent delete of the owner waits for this transaction,
-- and its cascade (resources_cascade_delete) then finds the children; an
-- owner deleted first is not found, and the insert fails. The error is the
-- one the foreign key raised (foreign_key_violation, constraint
-- resources_owner_id_fkey), so callers see no difference. Owners are locked
-- in id order, and the probe is the primary key's (seq scans off: the
-- transition table has no statistics, and a session keeps the plan).
CREATE OR REPLACE FUNCTION resources_owner_check() RETURNS trigger
LANGUAGE plpgsql SET jit = off SET enable_seqscan = off AS $$
DECLARE
    v_missing uuid;
BEGIN
    SELECT o.id INTO v_missing
      FROM (SELECT DISTINCT n.owner_id AS id FROM new_rows n WHERE n.owner_id IS NOT NULL ORDER BY 1) o
      LEFT JOIN LATERAL (SELECT true AS found FROM resources r WHERE r.id = o.id FOR KEY SHARE) l ON true
     WHERE l.found IS NULL
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'insert or update on table "resources" violates foreign key constraint "resources_owner_id_fkey"'
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'resources_owner_id_fkey', TABLE = 'resources',
                  DETAIL = format('Key (owner_id)=(%s) is not present in table "resources".', v_missing);
    END IF;
    RETURN NULL;
END
$$;
