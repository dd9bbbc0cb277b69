-- drain_value_flows: step 3 of drain_outbox_range. Dependents (not frozen,
-- not deleting) of upstreams whose status changed in this batch get the new
-- values in their spec (apply_value_flows; the generation bump is
-- resources_bump_generation's), before the upstream status update, so the
-- cascade sees them at their new generation. A dependent whose every changed
-- upstream is syncing in this batch is scheduled by the cascade; the others
-- (an upstream re-synced with a new status) are returned, for the re-gate.
-- p_items is the fenced batch, drain_item[]: declared anyarray because the
-- function set is created before the schema's types exist (db/migrate), so a
-- signature cannot name one. Called once per batch, only by
-- drain_outbox_range, whose SET clauses (custom plans, no JIT) are in effect.
--
-- The update's key is compared as "r.id = ANY (ARRAY[s.id])" with seq scans
-- off, as in drain_apply: a loop over the dependents probing the primary
-- key is the only plan without a disabled node. As "r.id = s.id", a
-- resources table analyzed while empty (a fleet torn down, another applied)
-- looked empty however much it held, and the loop ran over its whole
-- primary key: 296,000 buffers for a batch of 100 in a 10k fleet
-- (TestPlans_HotStatementsKeepTheirPlans, "emptied fleet").
CREATE OR REPLACE FUNCTION drain_value_flows(p_items anyarray, p_now timestamptz) RETURNS uuid[]
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_subst uuid[];
BEGIN
    WITH srcs AS (
        SELECT d.dependent_id, jsonb_agg(jsonb_build_array(d.value_flows, i.status) ORDER BY d.dependency_id) AS srcs,
               bool_and(i.advance AND u.synced_gen < i.generation) AS cascaded
          FROM unnest(p_items) i
          CROSS JOIN LATERAL (SELECT u.status, u.synced_gen FROM resources u WHERE u.id = i.resource_id OFFSET 0) u
          CROSS JOIN LATERAL (SELECT d.dependent_id, d.dependency_id, d.value_flows FROM resource_deps d
                               WHERE d.dependency_id = i.resource_id AND d.value_flows <> '[]'::jsonb OFFSET 0) d
         WHERE i.task_type = 'reconcile' AND i.error_message IS NULL AND i.status IS NOT NULL
           AND i.status IS DISTINCT FROM u.status
         GROUP BY d.dependent_id
    ), subst AS (
        SELECT r.id, apply_value_flows(r.spec, s.srcs) AS spec, r.spec AS old_spec, s.cascaded
          FROM srcs s
          CROSS JOIN LATERAL (SELECT r.id, r.spec FROM resources r
                               WHERE r.id = s.dependent_id AND r.frozen_until IS NULL
                                 AND r.deletion_requested_at IS NULL OFFSET 0) r
    ), upd AS (
        UPDATE resources r SET spec = s.spec, updated_at = p_now
          FROM subst s
         WHERE r.id = ANY (ARRAY[s.id]) AND s.spec IS DISTINCT FROM s.old_spec
        RETURNING r.id, s.cascaded
    )
    SELECT array_agg(upd.id) FILTER (WHERE NOT upd.cascaded) INTO v_subst FROM upd;
    RETURN v_subst;
END
$$;
