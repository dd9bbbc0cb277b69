-- drain_lock: step 1 of drain_outbox_range, before anything is read for the
-- batch. Locks (FOR NO KEY UPDATE) every resource the popped results concern
-- — each result's resource, the value-flow dependents of a successful
-- reconcile that carries a status, and the owner and dependencies of a
-- successful delete (the layer its removal may unblock: teardown_advance
-- checks it later in the batch, and two drains finishing its last two
-- dependents must not each see the other's still there) — in id order:
-- concurrent drainers lock in one global order, so they cannot deadlock on
-- resources. The LATERAL subquery locks row by row in the order of the
-- sorted ids.
-- p_out is the popped batch, work_outbox[]: declared anyarray because the
-- function set is created before the schema's tables exist (db/migrate), so
-- a signature cannot name one. Called once per batch, only by
-- drain_outbox_range, whose SET clauses (custom plans, no JIT) are in effect.
CREATE OR REPLACE FUNCTION drain_lock(p_out anyarray) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1
       FROM (SELECT DISTINCT x.id
               FROM (SELECT u.resource_id AS id FROM unnest(p_out) u
                     UNION ALL
                     SELECT d.dependent_id FROM unnest(p_out) u
                      CROSS JOIN LATERAL (SELECT d.dependent_id FROM resource_deps d
                                           WHERE d.dependency_id = u.resource_id AND d.value_flows <> '[]'::jsonb
                                          OFFSET 0) d
                      WHERE u.task_type = 'reconcile' AND u.error_message IS NULL AND u.status IS NOT NULL
                     UNION ALL
                     SELECT p.id FROM unnest(p_out) u
                      CROSS JOIN LATERAL (SELECT r.owner_id AS id FROM resources r
                                           WHERE r.id = u.resource_id AND r.owner_id IS NOT NULL
                                          UNION ALL
                                          SELECT d.dependency_id FROM resource_deps d
                                           WHERE d.dependent_id = u.resource_id) p
                      WHERE u.task_type = 'delete' AND u.error_message IS NULL) x
              ORDER BY x.id) ids
      CROSS JOIN LATERAL (SELECT 1 FROM resources r WHERE r.id = ids.id FOR NO KEY UPDATE) l;
END
$$;
