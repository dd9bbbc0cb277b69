-- resource_phases_delete: deleted resources leave the phase index. AFTER
-- DELETE … FOR EACH STATEMENT (the owner cascade, resources_cascade_delete,
-- fires it once per level of a deleted subtree). One primary-key index scan
-- over the batch's ids (transition tables carry no statistics: a join could
-- be planned as a hash over a seq scan of the whole table). Seq scans are off, so the plan a
-- session keeps (the statement takes no parameters) is that probe even when
-- it was made on an empty table.
CREATE OR REPLACE FUNCTION resource_phases_delete() RETURNS trigger
LANGUAGE plpgsql SET jit = off SET enable_seqscan = off AS $$
BEGIN
    DELETE FROM resource_phases s WHERE s.id = ANY (ARRAY(SELECT o.id FROM old_rows o));
    RETURN NULL;
END
$$;
