-- teardown_advance: steps 2 and 3 of a delete for a set of candidates, the
-- event-driven engine. Of the candidate rows p_ids, each one that is marked
-- and UNBLOCKED — no owned child left and no dependent left (the
-- resource_deps edge disappears with the dependent's row) — either
--   * finalizers present, no delete task queued → enqueue its 'delete' task
--     (trigger 'deleteRequested'): its teardown runs now and only now, after
--     every dependent is gone;
--   * finalizers empty (teardown done, or a kind without one) → hard-delete
--     the row (teardown_remove; its queue rows go with it:
--     on_resources_deleted).
-- A hard delete can unblock the layer above, so the rows it removed hand
-- their owners and their dependencies on as the next candidates, until a
-- round deletes nothing: a finalizer-free subtree collapses at once, and a
-- finished teardown starts the next layer's in the same transaction.
-- Callers: request_resource_deletion and sweep_expired_orphans (the marked
-- tree, once), the drain (the rows whose delete task just succeeded) and
-- sweep_deletable (the reaper's backstop, over a bounded walk). The drain
-- locks the owners and dependencies of its finished deletes first
-- (drain_lock), so two drains finishing the last two dependents of one row
-- cannot each see the other's still present: the second waits for the
-- first's commit, and its check here, a later statement, sees it.
-- Only candidates in shards [p_lo, p_hi] are considered (the reaper's range;
-- 0..255 for the others), locked in id order, SKIP LOCKED (a row another
-- transaction holds is left to its holder, or to the backstop); at most
-- p_max rows are advanced (NULL: no bound). Every step is a primary-key or
-- index probe per candidate. A candidate whose ref names a providerconfig
-- that does not exist gets no delete task — its teardown would run with the
-- kind's default config — and is held (hold_config_missing) until the config
-- is applied again, when sweep_deletable's next pass reaches it.
-- Returns the number of rows advanced (tasks
-- enqueued + rows deleted); sends work_ready when it enqueued a task.
CREATE OR REPLACE FUNCTION teardown_advance(p_ids uuid[], p_lo int, p_hi int, p_now timestamptz, p_max int)
RETURNS int LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_cand    uuid[] := p_ids;
    v_hard    uuid[];
    v_fin     uuid[];
    v_missing uuid[];
    v_enq     int;
    v_del     int;
    v_queued  int := 0;
    v_total   int := 0;
BEGIN
    WHILE cardinality(v_cand) > 0 AND (p_max IS NULL OR v_total < p_max) LOOP
        v_enq := 0;
        v_del := 0;
        SELECT array_agg(c.id) FILTER (WHERE c.finalizers = '{}'),
               array_agg(c.id) FILTER (WHERE c.finalizers <> '{}')
          INTO v_hard, v_fin
          FROM (SELECT r.id, r.finalizers
                  FROM (SELECT DISTINCT u.id FROM unnest(v_cand) u(id) ORDER BY u.id) u
                 -- each candidate by its primary key, locked only if it
                 -- qualifies; OFFSET 0 keeps every probe a per-row index
                 -- probe (no anti-join or hashed subplan over a scan, and
                 -- never a walk of a marked-rows index filtered by id)
                 CROSS JOIN LATERAL (
                       SELECT r.id, r.finalizers
                         FROM resources r
                        WHERE r.id = u.id
                          AND r.shard_id BETWEEN p_lo AND p_hi
                          -- not a bare IS NOT NULL: while resources had a
                          -- partial index of the marked rows, it let a
                          -- session's plan made while few rows were marked
                          -- walk that index filtered by id, reading every
                          -- marked row for each candidate at a million; the
                          -- test stays one no index can match
                          AND coalesce(r.deletion_requested_at IS NOT NULL, false)
                          AND NOT EXISTS (SELECT 1 FROM resources o WHERE o.owner_id = r.id OFFSET 0)
                          AND NOT EXISTS (SELECT 1 FROM resource_deps d WHERE d.dependency_id = r.id OFFSET 0)
                          AND (r.finalizers = '{}'
                               OR NOT EXISTS (SELECT 1 FROM work_queue q
                                               WHERE q.shard_id BETWEEN p_lo AND p_hi
                                                 AND q.shard_id = r.shard_id AND q.resource_id = r.id
                                                 AND q.task_type = 'delete' OFFSET 0))
                       OFFSET 0
                          FOR UPDATE OF r SKIP LOCKED) r
                 LIMIT p_max - v_total) c;
        v_cand := '{}';

        IF v_fin IS NOT NULL THEN
            WITH fin AS MATERIALIZED (
                SELECT r.id, r.shard_id, r.kind, r.version, r.generation, pc.spec, pc.data,
                       r.provider_config_ref IS NOT NULL AND pc.kind IS NULL AS missing
                  FROM unnest(v_fin) f(id)
                 CROSS JOIN LATERAL (SELECT r.* FROM resources r WHERE r.id = f.id OFFSET 0) r
                  LEFT JOIN providerconfigs pc ON pc.kind = r.kind AND pc.name = r.provider_config_ref
            ), ins AS (
                INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, trigger,
                                        provider_config, provider_bundle, not_before)
                SELECT f.id, 'delete', f.shard_id, f.kind, f.version, f.generation, 'deleteRequested',
                       f.spec, f.data, p_now
                  FROM fin f
                 WHERE NOT f.missing
                ON CONFLICT (shard_id, resource_id, task_type, op_id) DO NOTHING
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM ins), (SELECT array_agg(f.id) FROM fin f WHERE f.missing)
              INTO v_enq, v_missing;
            IF v_missing IS NOT NULL THEN
                PERFORM hold_config_missing(v_missing, p_now);
            END IF;
            v_queued := v_queued + v_enq;
        END IF;

        IF v_hard IS NOT NULL THEN
            -- the layer above, read before the rows (and their edges) go
            SELECT coalesce(array_agg(DISTINCT p.id), '{}') INTO v_cand
              FROM (SELECT r.owner_id AS id FROM unnest(v_hard) h(id)
                     CROSS JOIN LATERAL (SELECT r.owner_id FROM resources r WHERE r.id = h.id OFFSET 0) r
                     WHERE r.owner_id IS NOT NULL
                    UNION ALL
                    SELECT d.dependency_id FROM resource_deps d WHERE d.dependent_id = ANY (v_hard)) p
             WHERE p.id <> ALL (v_hard);
            v_del := teardown_remove(v_hard);
        END IF;

        v_total := v_total + v_enq + v_del;
        EXIT WHEN v_del = 0;
    END LOOP;
    IF v_queued > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN v_total;
END
$$;
