-- claim_spans: claim_span over several spans (p_los[i], p_his[i]: each
-- inside one work_queue partition, in the order the store rotates them to)
-- in one statement: up to p_max tasks in all, from the spans holding a
-- claimable row, span by span until the batch is full.
--
-- A broker whose range crosses partitions made one round trip to learn
-- which spans hold work (claimable_spans, or claimable_rollup_spans for
-- rollups only) and one more per span it then claimed from: the probe's
-- round trip was half of the claim's cost in the broker, 5% of its CPU at a
-- 100k run's rate. Here the probe and the claims are one statement: the same
-- probe picks the spans, then claim_span runs on each (its own statements
-- keep their own settings and plans), each asked for what the earlier ones
-- left of p_max. Every span's leases commit together, so a failure part-way
-- leases nothing.
CREATE OR REPLACE FUNCTION claim_spans(p_kind text, p_version text, p_task_type text, p_max int,
                                       p_los int[], p_his int[], p_worker text, p_now timestamptz,
                                       p_range_lo int, p_only_rollups boolean)
RETURNS TABLE (shard_id int, resource_id uuid, task_type text, op_id uuid, claim_epoch bigint,
               task_generation bigint, trigger text, attempts int, provider_config jsonb,
               provider_bundle jsonb, deadline_secs int, kind text, version text, name text,
               labels jsonb, spec jsonb, status jsonb, generation bigint, composed_gen bigint,
               owner_id uuid, finalizers text[])
LANGUAGE plpgsql VOLATILE SET jit = off AS $fn$
DECLARE
    v_left int := p_max;
    v_n    int;
    v_i    int;
BEGIN
    FOREACH v_i IN ARRAY CASE WHEN p_only_rollups
                              THEN claimable_rollup_spans(p_kind, p_version, p_task_type, p_los, p_his, p_now)
                              ELSE claimable_spans(p_kind, p_version, p_task_type, p_los, p_his, p_now) END
    LOOP
        EXIT WHEN v_left <= 0;
        RETURN QUERY SELECT * FROM claim_span(p_kind, p_version, p_task_type, v_left, p_los[v_i], p_his[v_i],
                                              p_worker, p_now, p_range_lo, p_only_rollups);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_left := v_left - v_n;
    END LOOP;
END
$fn$;
