-- propagate_dependency_failure (AFTER UPDATE ON resources, per statement):
-- a terminal failure blocks its dependents; say so.
-- A dependent is scheduled only once every upstream has synced, so when an
-- upstream fails terminally its dependents would stay Reconciling forever —
-- and, being "still progressing", hold their composite's rollup back, so the
-- root never surfaces as Degraded. propagate_dependency_failure marks every
-- transitive dependent of a row that newly failed terminally as failed for
-- its live spec (failure_gen = generation) with failure_terminal = false and
-- a Synced=False/DependencyFailed condition:
--   * the phase says Failed and why, instead of an endless Reconciling;
--   * the rollup gate treats them as settled (failed), and the cascade's
--     "descendant newly failed" edge re-pends the root, which rolls up;
--   * non-terminal, so when the upstream is fixed (a spec edit) and syncs, the
--     cascade schedules its dependents again and a clean reconcile clears it.
-- Zero cost on the healthy path: the gate is a filter over the statement's
-- new rows for failure_terminal, which is false on every success.
CREATE OR REPLACE FUNCTION propagate_dependency_failure() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_failed uuid[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM new_rows WHERE failure_terminal AND failure_gen = generation) THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(n.id) INTO v_failed
      FROM new_rows n JOIN old_rows o ON o.id = n.id
     WHERE n.failure_terminal AND n.failure_gen = n.generation
       AND NOT (o.failure_terminal AND o.failure_gen = o.generation);
    IF v_failed IS NULL THEN
        RETURN NULL;
    END IF;
    -- each step probes idx_resource_deps_dependency per node (LATERAL …
    -- OFFSET 0), as the owner walks do (see descendant_ids): a join to the
    -- step can be planned as a hash join over a Seq Scan of every edge
    WITH RECURSIVE down(id) AS (
        SELECT d.dependent_id FROM resource_deps d WHERE d.dependency_id = ANY (v_failed)
        UNION
        SELECT d.dependent_id
          FROM down
         CROSS JOIN LATERAL (SELECT d.dependent_id FROM resource_deps d
                              WHERE d.dependency_id = down.id OFFSET 0) d
    ), marked AS (
        UPDATE resources r
           SET failure_gen = r.generation, failure_terminal = false, updated_at = now()
          FROM (SELECT id FROM down ORDER BY id) t
         WHERE r.id = t.id
           AND r.synced_gen < r.generation AND r.failure_gen <> r.generation
           AND r.frozen_until IS NULL AND r.deletion_requested_at IS NULL
        RETURNING r.id, r.generation
    )
    INSERT INTO resource_conditions AS c (resource_id, type, status, reason, message, observed_generation, last_transition_time)
    SELECT m.id, 'Synced', 'False', 'DependencyFailed',
           'an upstream dependency failed terminally; this resource reconciles once it recovers', m.generation, now()
      FROM marked m
    ON CONFLICT (resource_id, type) DO UPDATE
       SET status = EXCLUDED.status, reason = EXCLUDED.reason, message = EXCLUDED.message,
           observed_generation = EXCLUDED.observed_generation,
           last_transition_time = CASE WHEN c.status = EXCLUDED.status THEN c.last_transition_time
                                       ELSE EXCLUDED.last_transition_time END;
    RETURN NULL;
END
$$;
