-- schedule_lagging_upstreams: the scheduler's upstream gate, one definition
-- shared by schedule_candidates (which asks for the first row: LIMIT 1) and
-- explain_resource (which names them). A resource may be scheduled only when
-- every upstream it depends on (resource_deps) has caught up: synced_gen >=
-- generation. The rows are the upstreams that have not.
-- An inlinable SQL function (STABLE, one SELECT, no SET): the planner splices
-- it into the caller's LATERAL, so the scheduler's plan is the probe it always
-- was — resource_deps' primary key, then one resources primary-key probe per
-- upstream (OFFSET 0 keeps it a probe, never a hash of every lagging row).
CREATE OR REPLACE FUNCTION schedule_lagging_upstreams(p_id uuid)
RETURNS TABLE (dependency_id uuid) LANGUAGE sql STABLE AS $$
    SELECT d.dependency_id
      FROM resource_deps d
      CROSS JOIN LATERAL (SELECT 1 FROM resources u
                           WHERE u.id = d.dependency_id AND u.synced_gen < u.generation OFFSET 0) u
     WHERE d.dependent_id = p_id
$$;
