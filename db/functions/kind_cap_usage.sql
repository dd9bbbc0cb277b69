-- kind_cap_usage: a kind version's concurrency cap (kind_config.max_inflight,
-- 0 = uncapped) and the tasks in flight against it (the SUM of its
-- kind_inflight partials). One definition shared by claim_budget (which reads
-- it under its per-kind lock) and explain_resource (the "cap full" gate).
CREATE OR REPLACE FUNCTION kind_cap_usage(p_kind text, p_version text)
RETURNS TABLE (cap int, in_flight bigint) LANGUAGE sql STABLE AS $$
    SELECT coalesce((SELECT kc.max_inflight FROM kind_config kc WHERE kc.kind = p_kind AND kc.version = p_version), 0),
           coalesce((SELECT sum(k.in_flight) FROM kind_inflight k WHERE k.kind = p_kind AND k.version = p_version), 0)::bigint
$$;
