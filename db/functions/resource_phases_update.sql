-- resource_phases_update: keeps the phase index in step with resources.
-- AFTER UPDATE … FOR EACH STATEMENT, so a drained batch runs it once. Only
-- rows whose indexed copy differs are written: a status write that keeps the
-- phase (a resync's re-observe, a rollup refresh) touches nothing here, and
-- the wide row's update stays heap-only. Each updated row's entry is one
-- primary-key probe: the only join is a nested loop driven by the transition
-- table (hash and merge joins are off for this function — transition tables
-- carry no statistics, and a hash join over a seq scan of the whole table, or
-- an "= ANY (batch ids)" recheck per probe, made a 1,000-row batch cost
-- 600 ms instead of a few). Seq scans are off too: the statement takes no
-- parameters, so a session keeps the plan of its first call, and one made on
-- a fresh install's empty table ran the loop over a Seq Scan of the phase
-- index, kept as the fleet grew (TestPlans_TeardownSessionPlannedOnEmptyTables).
--
-- The join's key is compared as "s.id = ANY (ARRAY[n.id])", an equality the
-- planner can neither merge nor hash on: no order of an index is of use to
-- the join, so no index is walked whole for it, and the only plan without a
-- disabled node is the loop over new_rows probing the primary key. As
-- "s.id = n.id", a phase table whose statistics were taken while it was
-- empty (a fleet torn down and analyzed, another applied) looked empty
-- however much it held, and the loop ran over its whole primary key, walked
-- in order, each entry checked against the batch: 13,000 buffers for 100
-- rows of a 10k fleet (TestPlans_HotStatementsKeepTheirPlans, "emptied
-- fleet"). The probe costs what the equality's did.
CREATE OR REPLACE FUNCTION resource_phases_update() RETURNS trigger
LANGUAGE plpgsql SET jit = off SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off AS $$
BEGIN
    UPDATE resource_phases s
       SET phase = n.phase, kind = n.kind, owner_id = n.owner_id, root_id = n.root_id,
           shard_id = n.shard_id, created_at = n.created_at,
           since = CASE WHEN s.phase = n.phase THEN s.since ELSE now() END
      FROM new_rows n
     WHERE s.id = ANY (ARRAY[n.id])
       AND (s.phase, s.kind, s.owner_id, s.root_id, s.shard_id, s.created_at)
           IS DISTINCT FROM (n.phase, n.kind, n.owner_id, n.root_id, n.shard_id, n.created_at);
    RETURN NULL;
END
$$;
