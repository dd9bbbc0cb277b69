-- sweep_deletable: steps 2 and 3 of a delete, the level-triggered engine.
-- For each marked row in [p_lo, p_hi] that is UNBLOCKED — no owned child left
-- and no dependent left (the resource_deps edge disappears with the
-- dependent's row) — either
--   * finalizers present, no delete task queued → enqueue its 'delete' task
--     (trigger 'deleteRequested'): its teardown runs now and only now, after
--     every dependent is gone;
--   * finalizers empty (teardown done, or a kind without one) → hard-delete
--     the row (and any leftover queue rows of it).
-- A hard delete can unblock the layer above, so the sweep loops within the
-- call until a pass deletes nothing: a ready subtree collapses at once. Strict
-- wait: a row whose teardown never finishes keeps its finalizer and blocks its
-- owners and dependencies forever (no dead-letter unblock), surfacing the
-- stuck row instead of orphaning infrastructure. (A dependency cycle among
-- marked rows never unblocks either; composers emit DAGs.)
-- Idle gate: idx_resources_deleting (empty in steady state). Candidates are
-- locked SKIP LOCKED; at most p_max rows are advanced per call.
-- Returns the number of rows advanced (tasks enqueued + rows deleted).
-- Seq scans are off: a session keeps the generic plan it made on its first
-- calls, on a fresh install's empty tables, where a scan is the cheap plan;
-- kept while a bulk apply grows the table, it would read it whole on every
-- tick until an ANALYZE (TestPlans_ReaperSessionPlannedOnEmptyTables).
CREATE OR REPLACE FUNCTION sweep_deletable(p_lo int, p_hi int, p_max int, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_hard   uuid[];
    v_fin    uuid[];
    v_enq    int;
    v_del    int;
    v_queued int := 0;
    v_total  int := 0;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM resources
                    WHERE deletion_requested_at IS NOT NULL AND shard_id BETWEEN p_lo AND p_hi) THEN
        RETURN 0;
    END IF;
    LOOP
        v_enq := 0;
        v_del := 0;
        SELECT array_agg(c.id) FILTER (WHERE c.finalizers = '{}'),
               array_agg(c.id) FILTER (WHERE c.finalizers <> '{}')
          INTO v_hard, v_fin
          FROM (SELECT r.id, r.finalizers
                  FROM resources r
                 WHERE r.deletion_requested_at IS NOT NULL
                   AND r.shard_id BETWEEN p_lo AND p_hi
                   -- OFFSET 0 keeps each probe a per-row index probe: no
                   -- anti-join or hashed subplan over a Seq Scan
                   AND NOT EXISTS (SELECT 1 FROM resources o WHERE o.owner_id = r.id OFFSET 0)
                   AND NOT EXISTS (SELECT 1 FROM resource_deps d WHERE d.dependency_id = r.id OFFSET 0)
                   AND (r.finalizers = '{}'
                        OR NOT EXISTS (SELECT 1 FROM work_queue q
                                        WHERE q.shard_id BETWEEN p_lo AND p_hi
                                          AND q.shard_id = r.shard_id AND q.resource_id = r.id
                                          AND q.task_type = 'delete' OFFSET 0))
                 LIMIT p_max - v_total
                 FOR UPDATE OF r SKIP LOCKED) c;

        IF v_fin IS NOT NULL THEN
            INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, trigger,
                                    provider_config, provider_bundle, not_before)
            SELECT r.id, 'delete', r.shard_id, r.kind, r.version, r.generation, 'deleteRequested',
                   pc.spec, pc.data, p_now
              FROM resources r
              LEFT JOIN providerconfigs pc ON pc.kind = r.kind AND pc.name = r.provider_config_ref
             WHERE r.id = ANY (v_fin)
            ON CONFLICT (shard_id, resource_id, task_type, op_id) DO NOTHING;
            GET DIAGNOSTICS v_enq = ROW_COUNT;
            v_queued := v_queued + v_enq;
        END IF;

        IF v_hard IS NOT NULL THEN
            DELETE FROM work_queue WHERE shard_id BETWEEN p_lo AND p_hi AND resource_id = ANY (v_hard);
            -- ARRAY(SELECT unnest(…)): uncountable, so a primary-key probe
            DELETE FROM resources WHERE id = ANY (ARRAY(SELECT unnest(v_hard)));
            GET DIAGNOSTICS v_del = ROW_COUNT;
        END IF;

        v_total := v_total + v_enq + v_del;
        EXIT WHEN v_del = 0 OR v_total >= p_max;
    END LOOP;
    IF v_queued > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN v_total;
END
$$;
