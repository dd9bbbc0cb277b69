-- teardown_tree: the teardown tree of p_id — p_id, everything it owns
-- (owner_id subtree) and everything that depends on it (resource_deps
-- dependency → dependent), transitively across both edge kinds. UNION
-- discards ids already reached, so a dependency cycle terminates. Each step
-- probes idx_resources_owner and idx_resource_deps_dependency once per node
-- (LATERAL). What cascade_mark_for_deletion marks, and what a delete's
-- kick hands teardown_advance.
CREATE OR REPLACE FUNCTION teardown_tree(p_id uuid) RETURNS SETOF uuid
LANGUAGE sql STABLE SET jit = off AS $$
    WITH RECURSIVE tree(id) AS (
        SELECT id FROM resources WHERE id = p_id
        UNION
        SELECT n.id
          FROM tree t
         CROSS JOIN LATERAL (
               SELECT c.id FROM resources c WHERE c.owner_id = t.id
               UNION ALL
               SELECT d.dependent_id FROM resource_deps d WHERE d.dependency_id = t.id
         ) n
    )
    SELECT id FROM tree
$$;
