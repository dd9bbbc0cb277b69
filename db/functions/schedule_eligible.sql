-- schedule_eligible: the gate every writer calls after creating a resource or
-- changing its spec (and the cascade after an upstream syncs). See
-- schedule_candidates for the conditions. Returns the number of work_queue
-- rows inserted or raised to a newer generation.
CREATE OR REPLACE FUNCTION schedule_eligible(p_ids uuid[], p_now timestamptz DEFAULT now()) RETURNS int
LANGUAGE sql AS $$
    SELECT schedule_candidates(p_ids, p_now, false)
$$;
