-- resource_phases_update: keeps the phase index in step with resources.
-- AFTER UPDATE … FOR EACH STATEMENT, so a drained batch runs it once. Only
-- rows whose indexed copy differs are written: a status write that keeps the
-- phase (a resync's re-observe, a rollup refresh) touches nothing here, and
-- the wide row's update stays heap-only. The phase index rows are found by
-- primary key (= ANY of the batch's ids): transition tables carry no
-- statistics, and a hash join could otherwise seq-scan the whole index table.
CREATE OR REPLACE FUNCTION resource_phases_update() RETURNS trigger
LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    UPDATE resource_phases s
       SET phase = n.phase, kind = n.kind, owner_id = n.owner_id, root_id = n.root_id,
           shard_id = n.shard_id, created_at = n.created_at,
           since = CASE WHEN s.phase = n.phase THEN s.since ELSE now() END
      FROM new_rows n
     WHERE s.id = ANY (ARRAY(SELECT x.id FROM new_rows x))
       AND s.id = n.id
       AND (s.phase, s.kind, s.owner_id, s.root_id, s.shard_id, s.created_at)
           IS DISTINCT FROM (n.phase, n.kind, n.owner_id, n.root_id, n.shard_id, n.created_at);
    RETURN NULL;
END
$$;
