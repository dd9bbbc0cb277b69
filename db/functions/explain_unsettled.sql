-- explain_unsettled: the live descendants holding a rollup root back — the
-- rows rollup_gate counts: phase Reconciling in the phase index
-- (resource_phases). A top root (p_top) reads them by root_id; a nested
-- composite walks its owner subtree, as rollup_gate does. Frozen, deleting
-- and failed descendants never hold a rollup, so they are not listed. The
-- walk's step probes the phase index by owner per node (LATERAL … OFFSET 0;
-- see descendant_ids).
CREATE OR REPLACE FUNCTION explain_unsettled(p_root uuid, p_top boolean)
RETURNS TABLE (id uuid) LANGUAGE sql STABLE AS $$
    SELECT d.id FROM resource_phases d
     WHERE p_top AND d.root_id = p_root AND d.phase = 'Reconciling'
    UNION ALL
    SELECT s.id FROM (
        WITH RECURSIVE sub AS (
            SELECT c.id, c.phase FROM resource_phases c WHERE NOT p_top AND c.owner_id = p_root
            UNION ALL
            SELECT c.id, c.phase
              FROM sub s
             CROSS JOIN LATERAL (SELECT c.id, c.phase FROM resource_phases c
                                  WHERE c.owner_id = s.id OFFSET 0) c)
        SELECT sub.id, sub.phase FROM sub) s
     WHERE s.phase = 'Reconciling'
$$;
