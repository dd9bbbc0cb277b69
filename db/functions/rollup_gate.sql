-- rollup_gate: the rollup gate, and the straddle probe in the same pass.
-- A composite root's rollup may run once every LIVE descendant is settled:
-- synced (synced_gen >= generation) or failed for its live spec. Frozen
-- (orphaned, quarantined) and deleting descendants are excluded, so they
-- never hold a rollup back. Returns
--   0  every live descendant settled: the gate is open;
--   1  some descendant still progressing, and no straddle possible;
--   2  some descendant still progressing, and a straddle is possible.
-- Straddle: when a root's last unsettled descendants are settled by two
-- concurrent drain transactions, neither snapshot sees "all settled" and
-- neither pends the root. That is only possible when every descendant this
-- snapshot still sees as unsettled is being (or has just been) written by a
-- transaction it cannot see (xmax_in_flight). The probe reads the phase
-- index (resource_phases, migration 00002): "unsettled" is its phase
-- Reconciling, and a transaction that settles a row rewrites that row's
-- phase index entry — before its own cascade runs this gate (the index's
-- triggers fire first) — so the entry's xmax is the settler's. One idle unsettled descendant
-- means its own settle will cascade to the root later: no straddle. At most
-- p_few remaining unsettled also counts as "possible" (the cascade passes 4:
-- it covers a MultiXactId xmax the in-flight test cannot read).
-- Cost: a top root (root_id IS NULL) reads at most five entries of
-- idx_resource_phases_unsettled (whose predicate is exactly the unsettled test) in
-- the common case — one idle row among the first five ends the probe — which
-- keeps the per-batch root evaluation cheap on the 1M path; only a root whose
-- first five are all in flight walks further. A nested composite walks its
-- owner subtree in the phase index (lazily: the walk stops as soon as the answer is known). Each
-- branch is planned on its own, and JIT is off (the recursive walk's estimate
-- would otherwise compile on every call).
-- Plans: generic, built once per session. The gate's statements take scalar
-- arguments only and name no partitioned table, so the generic plan is the
-- custom one (the same index probes, checked at 10k and 1M-row statistics),
-- and planning per call was the gate's larger cost. Without its own setting
-- it ran under the drain's force_custom_plan (the cascade calls it inside
-- drain_outbox_range): one plan per call, 0.08 ms against 0.05 ms of
-- execution, for ~0.3 calls a leaf at 1M. A generic plan is kept until an
-- ANALYZE replaces it, and one made on a fresh install's empty phase index
-- was a Seq Scan of the table as it grew: enable_seqscan is off here, so
-- every plan of the gate is an index probe whatever the statistics of the
-- moment it was made (every statement has one).
CREATE OR REPLACE FUNCTION rollup_gate(p_root uuid, p_top boolean, p_few int) RETURNS int
LANGUAGE plpgsql VOLATILE SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_n    int;
    v_idle boolean;
BEGIN
    IF p_top THEN
        SELECT count(*), coalesce(bool_or(NOT xmax_in_flight(x.xmax)), false) INTO v_n, v_idle
          FROM (SELECT d.xmax FROM resource_phases d
                 WHERE d.root_id = p_root AND d.phase = 'Reconciling'
                 LIMIT 5) x;
        IF v_n = 0 THEN
            RETURN 0;
        ELSIF v_n <= p_few THEN
            RETURN 2;
        ELSIF v_idle THEN
            RETURN 1;
        ELSIF v_n < 5 THEN
            RETURN 2;
        END IF;
        RETURN CASE WHEN EXISTS (
                        SELECT 1 FROM resource_phases d
                         WHERE d.root_id = p_root AND d.phase = 'Reconciling'
                           AND NOT xmax_in_flight(d.xmax))
                    THEN 1 ELSE 2 END;
    END IF;
    -- the walk's step probes idx_resource_phases_owner_page once per node
    -- (LATERAL … OFFSET 0): as a join, the step's size is a guess, and at
    -- 1M-row statistics it was planned as a hash join over a Seq Scan of
    -- the whole phase index
    WITH RECURSIVE sub AS (
        SELECT c.id, c.xmax AS x, c.phase FROM resource_phases c WHERE c.owner_id = p_root
        UNION ALL
        SELECT c.id, c.xmax, c.phase
          FROM sub s
         CROSS JOIN LATERAL (SELECT c.id, c.xmax, c.phase FROM resource_phases c
                              WHERE c.owner_id = s.id OFFSET 0) c)
    SELECT count(*), coalesce(bool_or(NOT xmax_in_flight(u.x)), false) INTO v_n, v_idle
      FROM (SELECT d.x FROM sub d WHERE d.phase = 'Reconciling') u;
    RETURN CASE WHEN v_n = 0 THEN 0 WHEN v_n <= p_few OR NOT v_idle THEN 2 ELSE 1 END;
END
$$;
