-- claim_budget: the per-kind concurrency cap's budget for one claim of a
-- CAPPED kind (the claim calls it only when kind_config.max_inflight > 0, so
-- an uncapped kind pays nothing). budget = max_inflight − SUM(kind_inflight
-- partials), read from the tiny partials table, never from work_queue.
-- Capped claims of one kind are serialised on a transaction advisory lock held
-- to the claim's commit, and the SUM is read after the lock in a fresh
-- snapshot (a VOLATILE function's statements take one each), so two claimers
-- can never spend the same budget. The cap and the SUM are kind_cap_usage,
-- which explain_resource reads too.
CREATE OR REPLACE FUNCTION claim_budget(p_kind text, p_version text, p_max int) RETURNS int
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_cap  int;
    v_used bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('claim_budget'), hashtext(p_kind || '/' || p_version));
    SELECT u.cap, u.in_flight INTO v_cap, v_used FROM kind_cap_usage(p_kind, p_version) u;
    IF coalesce(v_cap, 0) = 0 THEN
        RETURN p_max;
    END IF;
    RETURN greatest(0, least(p_max::bigint, v_cap - v_used))::int;
END
$$;
