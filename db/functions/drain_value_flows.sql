-- drain_value_flows: step 3 of drain_outbox_range. Dependents (not frozen,
-- not deleting) of upstreams whose status changed in this batch get the new
-- values in their spec (apply_value_flows; the generation bump is
-- resources_bump_generation's), before the upstream status update, so the
-- cascade sees them at their new generation. A dependent whose every changed
-- upstream is syncing in this batch is scheduled by the cascade; the others
-- (an upstream re-synced with a new status) are returned, for the re-gate.
--
-- A flowed value must satisfy the dependent kind's spec_schema, as an
-- applied spec must, and only Go holds the validator: the substituted
-- dependents of a kind whose schema constrains more than "an object" are
-- listed with their new specs in the transaction-local setting
-- converge.value_flow_checks (a JSON array of [id, kind, version,
-- manifest_gen, spec]), which the drainer (core/store/pipeline,
-- DrainOutboxBatch) reads in the same statement and validates before it
-- commits: the specs travel with the drain's answer, so the check reads no
-- row again. A kind without such a schema costs one probe of kind_manifest
-- per distinct kind in the batch. When a spec is refused the drainer rolls the
-- batch back and drains again with converge.value_flow_refused set, a JSON
-- array of {"id", "spec_md5", "message"}: a dependent whose substitution
-- comes out as exactly the refused spec keeps its spec and fails, terminally,
-- for its generation (so the gate and the cascade pass it over), with a
-- Synced condition and a Warning event, reason ValueFlowRefused, naming the
-- flow and the violation; a later status that flows a different value
-- substitutes it (a new generation, which clears the failure). The refusal
-- is written before the status update, so the cascade never schedules it,
-- and the dependent's reconcile of that generation, queued or in flight, is
-- dropped with its result: it ran on the spec the refusal keeps, and its
-- success would clear the failure.
-- p_items is the fenced batch, drain_item[]: declared anyarray because the
-- function set is created before the schema's types exist (db/migrate), so a
-- signature cannot name one. Called once per batch, only by
-- drain_outbox_range, whose SET clauses (custom plans, no JIT) are in effect.
--
-- The spec update writes each dependent's row at the TID subst read it by
-- key ("r.ctid = c.tid", as in drain_apply: the rows are locked since
-- drain_lock), with seq scans off: a loop over the dependents fetching each
-- TID is the only plan without a disabled node. As "r.id = s.id", a
-- resources table analyzed while empty (a fleet torn down, another applied)
-- looked empty however much it held, and the loop ran over its whole
-- primary key: 296,000 buffers for a batch of 100 in a 10k fleet
-- (TestPlans_HotStatementsKeepTheirPlans, "emptied fleet").
CREATE OR REPLACE FUNCTION drain_value_flows(p_items anyarray, p_now timestamptz) RETURNS uuid[]
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_subst   uuid[];
    v_checks  jsonb;
    v_refused jsonb := nullif(current_setting('converge.value_flow_refused', true), '')::jsonb;
    v_fail    jsonb;
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
        SELECT r.tid, r.id, r.kind, r.version, apply_value_flows(r.spec, s.srcs) AS spec, r.spec AS old_spec, s.cascaded
          FROM srcs s
          CROSS JOIN LATERAL (SELECT r.ctid AS tid, r.id, r.kind, r.version, r.spec FROM resources r
                               WHERE r.id = s.dependent_id AND r.frozen_until IS NULL
                                 AND r.deletion_requested_at IS NULL OFFSET 0) r
    ), chg AS (
        SELECT s.tid, s.id, s.kind, s.version, s.spec, s.cascaded, x.message AS refused
          FROM subst s
          LEFT JOIN LATERAL (SELECT x->>'message' AS message FROM jsonb_array_elements(v_refused) x
                              WHERE (x->>'id')::uuid = s.id AND x->>'spec_md5' = md5(s.spec::text) LIMIT 1) x
                 ON v_refused IS NOT NULL
         WHERE s.spec IS DISTINCT FROM s.old_spec
    ), upd AS (
        UPDATE resources r SET spec = c.spec, updated_at = p_now
          FROM chg c
         WHERE r.ctid = c.tid AND c.refused IS NULL
        RETURNING r.id, c.cascaded, c.kind, c.version, c.spec
    ), checked AS (
        -- the kinds whose schema a flowed value could break: one probe a kind
        SELECT k.kind, k.version, m.manifest_gen
          FROM (SELECT DISTINCT u.kind, u.version FROM upd u) k
          JOIN kind_manifest m ON m.kind = k.kind AND m.version = k.version
         WHERE coalesce(m.manifest->'spec_schema', 'null'::jsonb)
               NOT IN ('null'::jsonb, 'true'::jsonb, '{}'::jsonb, '{"type":"object"}'::jsonb)
    )
    SELECT array_agg(u.id) FILTER (WHERE NOT u.cascaded),
           jsonb_agg(jsonb_build_array(u.id, u.kind, u.version, k.manifest_gen, u.spec)) FILTER (WHERE k.kind IS NOT NULL),
           (SELECT jsonb_agg(jsonb_build_array(c.id, c.refused)) FROM chg c WHERE c.refused IS NOT NULL)
      INTO v_subst, v_checks, v_fail
      FROM upd u
      LEFT JOIN checked k ON k.kind = u.kind AND k.version = u.version;
    IF v_checks IS NOT NULL THEN
        PERFORM set_config('converge.value_flow_checks', v_checks::text, true);
    END IF;
    IF v_fail IS NOT NULL THEN
        WITH f AS (
            SELECT (x->>0)::uuid AS id, left(x->>1, 4096) AS message FROM jsonb_array_elements(v_fail) x
        ), upd AS (
            UPDATE resources r SET failure_gen = r.generation, failure_terminal = true, updated_at = p_now
              FROM f
             WHERE r.id = ANY (ARRAY[f.id])
            RETURNING r.id, r.generation, f.message
        ), cond AS (
            INSERT INTO resource_conditions AS c (resource_id, type, status, reason, message, observed_generation,
                                                  last_transition_time)
            SELECT u.id, 'Synced', 'False', 'ValueFlowRefused', u.message, u.generation, p_now FROM upd u
            ON CONFLICT (resource_id, type) DO UPDATE
               SET status               = EXCLUDED.status,
                   reason               = EXCLUDED.reason,
                   message              = EXCLUDED.message,
                   observed_generation  = EXCLUDED.observed_generation,
                   last_transition_time = CASE WHEN c.status IS DISTINCT FROM EXCLUDED.status
                                               THEN EXCLUDED.last_transition_time ELSE c.last_transition_time END
        )
        INSERT INTO resource_events (resource_id, type, reason, message, created_at)
        SELECT u.id, 'Warning', 'ValueFlowRefused', u.message, p_now FROM upd u;
        -- A reconcile of the refused dependent queued or in flight runs on
        -- the spec the refusal keeps, and its success would clear the
        -- failure: its queue row goes (a result that lands later is fenced
        -- out), and its result in this batch, if any, is dropped by
        -- drain_outbox_range, which reads converge.value_flow_failed.
        DELETE FROM work_queue w
         USING (SELECT (x->>0)::uuid AS id FROM jsonb_array_elements(v_fail) x) f
         CROSS JOIN LATERAL (SELECT r.shard_id FROM resources r WHERE r.id = f.id OFFSET 0) r
         WHERE w.shard_id = r.shard_id AND w.resource_id = f.id AND w.task_type = 'reconcile';
        PERFORM set_config('converge.value_flow_failed',
                           (SELECT jsonb_agg(x->0) FROM jsonb_array_elements(v_fail) x)::text, true);
    END IF;
    RETURN v_subst;
END
$$;
