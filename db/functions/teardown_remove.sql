-- teardown_remove: the hard delete of teardown_advance and of an expired
-- orphan (sweep_expired_orphans) — removes the rows p_ids, each by its
-- primary key (ARRAY(SELECT unnest(…)): the planner cannot count it, and a
-- known array of a few hundred ids was costed as a Seq Scan of a small
-- table), their queue rows with them (on_resources_deleted), and returns
-- how many went.
-- Its own function for its settings. A removed row fires the foreign keys'
-- ON DELETE CASCADE actions, five of them (its events, conditions,
-- operations, spec history and owned provider configs), each one of
-- Postgres's saved referential-action statements run once per row; its
-- children and edges go once per statement (resources_cascade_delete). Planned for its row, each costs more than its probe: the
-- drain's force_custom_plan made that 0.11 ms a removed row, and auto is not
-- enough — in a 1M teardown auto planned the children's action for every
-- row (0.025 ms a row), because a plan for a leaf's id, read against the
-- owner column's common values, always came out a little cheaper than the
-- kept plan for any id, which expects an owner's thousand children. So the
-- actions here run their generic plans, one plan a session, and seq scans
-- are off, so that plan is a probe of the referencing column's index (each
-- such column has one) whatever the statistics of the moment it was made,
-- an empty table's included. The statement triggers the delete fires run
-- under the same settings, and every statement of theirs that reads a
-- table by its rows probes it by key.
CREATE OR REPLACE FUNCTION teardown_remove(p_ids uuid[]) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_n int;
BEGIN
    DELETE FROM resources WHERE id = ANY (ARRAY(SELECT unnest(p_ids)));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
