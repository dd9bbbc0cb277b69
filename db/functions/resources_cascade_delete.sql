-- resources_cascade_delete: deleting resources deletes what references them
-- by owner and by edge (AFTER DELETE … FOR EACH STATEMENT), the cascade the
-- foreign keys of resources.owner_id and resource_deps did row by row:
-- the owned children (a DELETE that fires this trigger again, one level
-- down; issued only when there are any), then every edge either end of
-- which is gone. Each step probes an
-- index with the batch's ids (idx_resources_owner; the edges' primary key
-- and idx_resource_deps_dependency).
--
-- The checks that replaced the foreign keys (resources_owner_check,
-- resource_deps_check) lock a referenced resource FOR KEY SHARE, so the
-- delete of a resource a transaction is referencing waits for it; these
-- statements then see what it committed, because each takes a new snapshot
-- under READ COMMITTED. Under REPEATABLE READ they would not (the foreign
-- keys' cascade had a snapshot of its own for that), so a delete there is
-- refused: every writer of resources deletes under READ COMMITTED.
CREATE OR REPLACE FUNCTION resources_cascade_delete() RETURNS trigger
LANGUAGE plpgsql SET jit = off SET enable_seqscan = off AS $$
DECLARE
    v_ids uuid[];
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'resources are deleted under READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'feature_not_supported',
                  HINT = 'The delete''s cascade to owned resources and edges needs a snapshot per statement.';
    END IF;
    v_ids := ARRAY(SELECT o.id FROM old_rows o);
    IF cardinality(v_ids) = 0 THEN
        RETURN NULL; -- a delete of no rows fires statement triggers too
    END IF;
    -- Only when there are children: a nested DELETE, even of no rows, fires
    -- every statement trigger of resources again (this one included).
    IF EXISTS (SELECT 1 FROM resources r WHERE r.owner_id = ANY (v_ids)) THEN
        DELETE FROM resources r WHERE r.owner_id = ANY (v_ids);
    END IF;
    DELETE FROM resource_deps d WHERE d.dependent_id = ANY (v_ids);
    DELETE FROM resource_deps d WHERE d.dependency_id = ANY (v_ids);
    RETURN NULL;
END
$$;
