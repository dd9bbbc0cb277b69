-- descendant_ids: the owner subtree of a composite (nested rollup roots).
CREATE OR REPLACE FUNCTION descendant_ids(p_root uuid) RETURNS SETOF uuid
LANGUAGE sql STABLE SET jit = off AS $$
    WITH RECURSIVE sub AS (
        SELECT c.id FROM resources c WHERE c.owner_id = p_root
        UNION ALL
        SELECT c.id FROM resources c JOIN sub s ON c.owner_id = s.id)
    SELECT id FROM sub
$$;
