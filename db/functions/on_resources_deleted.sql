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
-- (TestPlans_TeardownSessionPlannedOnEmptyTables). Plain index scans are
-- off too, for a queue whose statistics were taken while it was drained
-- (analyzed with only dead rows on its pages, it looks empty however much
-- it holds): with seq scans off, a whole partition is still read by an
-- index scan without a condition, and to an empty-looking queue the loop
-- the other way round — every partition read whole, each row checked
-- against the deleted ones — cost less than a probe a row. With both off,
-- reading a partition whole has no plan without a disabled node, and the
-- probe a deleted row makes of its partition's primary key (a bitmap scan)
-- is the plan left (TestPlans_ReaperWalksKeepTheirPlans, "emptied").
CREATE OR REPLACE FUNCTION on_resources_deleted() RETURNS trigger
LANGUAGE plpgsql SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_material = off
SET enable_indexscan = off SET jit = off AS $$
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
