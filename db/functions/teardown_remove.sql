-- teardown_remove: the hard delete of teardown_advance and of an expired
-- orphan (sweep_expired_orphans) — removes the rows p_ids, each by its
-- primary key (ARRAY(SELECT unnest(…)): the planner cannot count it, and a
-- known array of a few hundred ids was costed as a Seq Scan of a small
-- table), their queue rows with them (on_resources_deleted), and returns
-- how many went.
-- Its own function for one setting: plan_cache_mode = auto. A removed row
-- fires the foreign keys' ON DELETE CASCADE actions, eight of them (its
-- children, its edges both ways, its events, conditions, operations, spec
-- history and owned provider configs), each one of Postgres's saved
-- referential-action statements run once per row. The drain calls teardown_advance under its
-- own force_custom_plan, which would plan each of them anew on every row:
-- 0.11 ms of planning a removed row in a fleet's teardown, more than the
-- probes themselves. Under auto a session plans each action a few times,
-- then keeps its generic plan, one probe of the referencing column's index
-- (each such column has one). The statement triggers the delete fires run
-- under auto too, as they do on every delete outside the drain.
CREATE OR REPLACE FUNCTION teardown_remove(p_ids uuid[]) RETURNS int
LANGUAGE plpgsql SET plan_cache_mode = auto SET jit = off AS $$
DECLARE
    v_n int;
BEGIN
    DELETE FROM resources WHERE id = ANY (ARRAY(SELECT unnest(p_ids)));
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
