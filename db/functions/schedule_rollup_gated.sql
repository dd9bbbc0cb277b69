-- schedule_rollup_gated: whether a resource's reconcile waits on the rollup
-- gate (rollup_gate) rather than its own spec. True for a rollup kind whose
-- composer is done with the live generation (composed_gen >= generation), or
-- a rollup kind with no composer. One definition shared by
-- schedule_candidates and explain_resource; an inlinable IMMUTABLE SQL
-- expression, so the scheduler's plan does not change.
CREATE OR REPLACE FUNCTION schedule_rollup_gated(p_has_rollup boolean, p_has_composer boolean,
                                                 p_composed_gen bigint, p_generation bigint)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(p_has_rollup, false)
           AND NOT (coalesce(p_has_composer, false) AND p_composed_gen < p_generation)
$$;
