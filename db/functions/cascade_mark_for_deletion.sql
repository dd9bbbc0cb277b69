-- cascade_mark_for_deletion: step 1 of a delete. Marks p_id's teardown tree
-- (teardown_tree: across BOTH edge kinds, transitively, everything it owns
-- and everything that depends on it; a dependency cycle terminates). Each
-- newly marked row gets deletion_requested_at = p_now and its kind's
-- finalizer_name (kind_config) seeded into finalizers[]; a row already marked
-- keeps its state (re-seeding would re-run a finished teardown). A finite frozen_until (orphan grace) is
-- cleared: the row is being deleted now; a quarantine ('infinity') stays, it
-- does not hold teardown back. Pending reconcile tasks of the marked rows are
-- dropped (a leased one finishes; its result cannot un-mark; a leased
-- compose of a marked root writes nothing: ApplyCompose). Rows are locked
-- in id order so two overlapping cascades cannot deadlock.
-- The tree is read again once its rows are locked, until a read finds
-- nothing new: a compose holding a node's lock when the tree was first read
-- (its children, or a child's edge to a node, not yet committed) commits
-- before the lock is granted, and what it wrote is in the next read; so
-- does one that took the lock after the read and committed before the mark
-- asked for it, and then every lock is granted at once: that the locks did
-- not wait does not show the first read sufficed, only a read taken under
-- them does. Once every node is locked nothing can join the tree — a
-- compose locks the owner it writes under, an edge's reference check
-- (resource_deps_check) takes a key-share lock on its dependency, as the
-- foreign key it replaced did — and the ones that come after the mark
-- see it (ApplyCompose writes nothing under a marked owner and refuses an
-- edge to a marked dependency). Nodes found by a later read are locked
-- after the first read's, out of id order: that only happens when the tree
-- grew meanwhile, and a deadlock it might meet is detected and fails the
-- request whole.
-- Enqueues nothing and removes nothing: that is teardown_advance's job, in a
-- separate statement, because a data-modifying CTE would see the pre-mark
-- snapshot and take every node for an unblocked leaf.
-- Returns the number of rows newly marked.
-- Planned per call, with seq scans off. A session keeps a plpgsql
-- statement's generic plan from its sixth call, and the queue delete's,
-- made while the queue was small (a fresh install, a fleet's first deletes),
-- reached the marked rows' queue entries by reading every queue partition
-- whole — by Seq Scans, or by each partition's whole index where the caller
-- had seq scans off, as the API's delete does — kept as the queue grew: in
-- a 1M teardown, 9,552 buffers a request where probing each marked row's
-- partition by key reads 436 (TestPlans_TeardownSessionPlannedOnEmptyTables
-- keeps the Seq Scans out; the rest is the planner's, per call). The queue
-- rows are found from the marked rows outward and deleted by TID
-- (work_queue_delete_tids): written as one join, under a queue analyzed
-- while drained the planner drove it from the queue, each partition's
-- primary key read through (390,330 buffers for one 10k-fixture root in
-- TestPlans_TeardownUnderEmptiedQueueStatistics, whose bound is 136k for
-- the whole teardown). The probe names only the key's leading columns and
-- the task type and lease are checked outside it (OFFSET 0 keeps them
-- there): with them inside, each partition that looked empty was read by
-- the pending index (its predicate, worker_id IS NULL, implied; its one
-- condition the task type) — every pending entry for every marked row. It
-- locks the marked rows' every queue row, as on_resources_deleted does; the
-- leased ones' settlers wait on the marked rows' own locks anyway.
CREATE OR REPLACE FUNCTION cascade_mark_for_deletion(p_id uuid, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan SET enable_seqscan = off AS $$
DECLARE
    v_ids   uuid[] := '{}';
    v_new   uuid[];
    v_n     int;
    v_parts regclass[];
    v_tids  text[];
BEGIN
    LOOP
        SELECT array_agg(x.id ORDER BY x.id) INTO v_new
          FROM (SELECT t.id FROM teardown_tree(p_id) t(id)
                EXCEPT
                SELECT k.id FROM unnest(v_ids) k(id)) x;
        EXIT WHEN v_new IS NULL;
        PERFORM 1 FROM resources WHERE id = ANY (v_new) ORDER BY id FOR UPDATE;
        v_ids := v_ids || v_new;
    END LOOP;
    IF cardinality(v_ids) = 0 THEN
        RETURN 0;
    END IF;

    UPDATE resources r
       SET deletion_requested_at = p_now,
           finalizers = coalesce(
               (SELECT CASE WHEN kc.finalizer_name = ANY (r.finalizers) THEN r.finalizers
                            ELSE r.finalizers || kc.finalizer_name END
                  FROM kind_config kc
                 WHERE kc.kind = r.kind AND kc.version = r.version AND kc.finalizer_name IS NOT NULL),
               r.finalizers),
           frozen_until = CASE WHEN r.frozen_until = 'infinity' THEN r.frozen_until END,
           updated_at = p_now
     WHERE r.id = ANY (v_ids)
       AND r.deletion_requested_at IS NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;

    SELECT array_agg(x.part), array_agg(x.tids::text) INTO v_parts, v_tids
      FROM (SELECT q.tableoid::regclass AS part, array_agg(q.ctid) AS tids
              FROM resources r
             CROSS JOIN LATERAL (SELECT w.tableoid, w.ctid, w.task_type, w.worker_id FROM work_queue w
                                  WHERE w.shard_id = r.shard_id AND w.resource_id = r.id
                                 OFFSET 0 FOR UPDATE) q
             WHERE r.id = ANY (v_ids)
               AND q.task_type = 'reconcile' AND q.worker_id IS NULL
             GROUP BY q.tableoid) x;
    PERFORM work_queue_delete_tids(v_parts, v_tids);
    RETURN v_n;
END
$$;
