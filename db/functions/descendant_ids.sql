-- descendant_ids: the owner subtree of a composite (nested rollup roots).
-- Each step of the walk probes idx_resources_owner once per node (LATERAL …
-- OFFSET 0): joined to the step instead, whose size the planner can only
-- guess, it was planned as a hash join over a Seq Scan of resources.
CREATE OR REPLACE FUNCTION descendant_ids(p_root uuid) RETURNS SETOF uuid
LANGUAGE sql STABLE SET jit = off AS $$
    WITH RECURSIVE sub AS (
        SELECT c.id FROM resources c WHERE c.owner_id = p_root
        UNION ALL
        SELECT c.id
          FROM sub s
         CROSS JOIN LATERAL (SELECT c.id FROM resources c WHERE c.owner_id = s.id OFFSET 0) c)
    SELECT id FROM sub
$$;
