-- resource_deps_check: both ends of inserted or updated edges, checked once
-- per statement (AFTER INSERT and AFTER UPDATE … FOR EACH STATEMENT) where
-- two foreign keys checked them once per row each. A compose inserts its
-- edges in one statement; each distinct resource they touch is probed and
-- locked once, FOR KEY SHARE, in id order, as the foreign keys' checks
-- locked it row by row: a concurrent delete of an end waits for this
-- transaction, and its cascade (resources_cascade_delete) then removes the
-- edge; an end deleted first is not found, and the statement fails with the
-- foreign key's own error (foreign_key_violation, constraint
-- resource_deps_dependent_id_fkey or resource_deps_dependency_id_fkey). An
-- update is a compose's new value flows (the ends are the key), rare. Seq
-- scans off: the transition table has no statistics, and a session keeps
-- the plan.
CREATE OR REPLACE FUNCTION resource_deps_check() RETURNS trigger
LANGUAGE plpgsql SET jit = off SET enable_seqscan = off AS $$
DECLARE
    v_missing uuid;
    v_column  text;
BEGIN
    SELECT e.id, e.col INTO v_missing, v_column
      FROM (SELECT DISTINCT ON (x.id) x.id, x.col
              FROM (SELECT n.dependent_id AS id, 'dependent_id' AS col FROM new_rows n
                    UNION ALL
                    SELECT n.dependency_id, 'dependency_id' FROM new_rows n) x
             ORDER BY x.id, x.col) e
      LEFT JOIN LATERAL (SELECT true AS found FROM resources r WHERE r.id = e.id FOR KEY SHARE) l ON true
     WHERE l.found IS NULL
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'insert or update on table "resource_deps" violates foreign key constraint "%"',
                        format('resource_deps_%s_fkey', v_column)
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = format('resource_deps_%s_fkey', v_column),
                  TABLE = 'resource_deps',
                  DETAIL = format('Key (%s)=(%s) is not present in table "resources".', v_column, v_missing);
    END IF;
    RETURN NULL;
END
$$;
