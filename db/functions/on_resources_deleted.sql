-- on_resources_deleted: a deleted resource leaves no queue rows behind (work
-- with no resource would be claimed forever) and no recheck; and 'deleted'
-- lifecycle rows, snapshotted from the old row, for matching enabled
-- bindings. Hash joins are off so the queue delete is a PK probe per row,
-- pruned to the row's partition, never a scan of all sixteen. The statement
-- takes no parameters, so a session keeps the plan of its first call; made
-- on an empty queue, that loop ran over every partition read whole once and
-- kept in memory (a Materialize over Seq Scans), and so it did as the queue
-- grew. Seq scans and materializing are off, so the kept plan probes each
-- row's partition by key whatever the queue's size when it was made
-- (TestPlans_TeardownSessionPlannedOnEmptyTables).
CREATE OR REPLACE FUNCTION on_resources_deleted() RETURNS trigger
LANGUAGE plpgsql SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_material = off SET jit = off AS $$
BEGIN
    DELETE FROM work_queue w USING old_rows o WHERE w.shard_id = o.shard_id AND w.resource_id = o.id;
    DELETE FROM rollup_recheck rr USING old_rows o WHERE rr.root_id = o.id;
    IF EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'deleted') THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT o.id, 'deleted', o.generation, b.name, o.shard_id, b.reactor, o.kind, to_jsonb(o)
          FROM old_rows o
          JOIN reactor_bindings b ON b.enabled AND b.transition = 'deleted' AND b.watch_kind = o.kind
                                 AND o.labels @> b.label_match
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            PERFORM pg_notify('lifecycle_ready', '');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
