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
--
-- The queue rows are found from the deleted rows, not the other way round:
-- a LATERAL probe of the row's partition's primary key (FOR UPDATE, so the
-- TIDs stay theirs) can only run inside the loop over the deleted rows,
-- and the rows found are deleted by TID in their own partitions, every
-- partition in one statement (work_queue_delete_tids). Written as one join, a queue whose
-- statistics were taken while it was drained (analyzed with only dead rows
-- on its pages, it looks empty however much it holds) made the planner run
-- the loop the other way round — every partition's primary key read whole,
-- each entry checked against the deleted rows — at any size
-- (TestPlans_ReaperWalksKeepTheirPlans and
-- TestPlans_TeardownUnderEmptiedQueueStatistics, "emptied"). Plain index
-- scans off stopped that too, at 2-7% more of a teardown's Postgres CPU
-- (a bitmap built for each row's probe).
CREATE OR REPLACE FUNCTION on_resources_deleted() RETURNS trigger
LANGUAGE plpgsql SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_material = off
SET jit = off AS $$
DECLARE
    v_parts regclass[];
    v_tids  text[];
BEGIN
    SELECT array_agg(x.part), array_agg(x.tids::text) INTO v_parts, v_tids
      FROM (SELECT q.tableoid::regclass AS part, array_agg(q.ctid) AS tids
              FROM old_rows o
             CROSS JOIN LATERAL (SELECT w.tableoid, w.ctid FROM work_queue w
                                  WHERE w.shard_id = o.shard_id AND w.resource_id = o.id
                                    FOR UPDATE) q
             GROUP BY q.tableoid) x;
    PERFORM work_queue_delete_tids(v_parts, v_tids);
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
