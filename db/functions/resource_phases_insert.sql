-- resource_phases_insert: new resources enter the phase index (the narrow
-- table the list pages, the rollup gate and the reaper's walk read; see
-- migration 00002). AFTER INSERT … FOR EACH STATEMENT, once per compose
-- batch (an INSERT … ON CONFLICT on resources reports only the rows it
-- inserted). An entry already there for a new row's id would be a broken
-- invariant, and fails the statement.
CREATE OR REPLACE FUNCTION resource_phases_insert() RETURNS trigger
LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    INSERT INTO resource_phases (id, kind, owner_id, root_id, shard_id, created_at, phase, since)
    SELECT n.id, n.kind, n.owner_id, n.root_id, n.shard_id, n.created_at, n.phase, now()
      FROM new_rows n;
    RETURN NULL;
END
$$;
