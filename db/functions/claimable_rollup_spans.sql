-- claimable_rollup_spans: which of a claim's shard spans hold a claimable
-- rollup of one (kind, version, task type) — a row pended with trigger
-- childrenSettled, pending and due — as the 1-based ordinals of the spans
-- given (p_los[i], p_his[i]: each inside one work_queue partition).
--
-- claimable_spans' twin for a claim of rollups only: a composite's pair
-- whose room its composes fill (claimed, they wait in the broker for its few
-- compose slots) still claims the rollups that finish its trees, and asked
-- claimable_spans it would visit every partition its queued composes sit in
-- to find none. One parameterised LIMIT 1 probe of
-- idx_work_queue_settled per span (its rows are the pending rollups only,
-- a handful); run-time pruning visits only that span's partition, and the
-- plan is generic and cached for the session as claimable_spans' is, with
-- seq scans off for the same reason.
CREATE OR REPLACE FUNCTION claimable_rollup_spans(p_kind text, p_version text, p_task_type text,
                                                  p_los int[], p_his int[], p_now timestamptz)
RETURNS int[] LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET jit = off AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(x.i::int ORDER BY x.i), '{}')
              FROM unnest(p_los, p_his) WITH ORDINALITY AS x(lo, hi, i)
             CROSS JOIN LATERAL (SELECT 1 FROM work_queue w
                                  WHERE w.shard_id BETWEEN x.lo AND x.hi
                                    AND w.kind = p_kind AND w.version = p_version AND w.task_type = p_task_type
                                    AND w.worker_id IS NULL AND w.trigger = 'childrenSettled'
                                    AND w.not_before <= p_now
                                  ORDER BY w.not_before
                                  LIMIT 1) e);
END
$$;
