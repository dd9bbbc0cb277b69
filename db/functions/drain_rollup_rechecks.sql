-- drain_rollup_rechecks: straddle close-out for roots the cascade armed in
-- rollup_recheck. For up to p_max armed roots in shards [p_lo, p_hi]:
--   1. wait for the transactions still settling their descendants: FOR SHARE
--      on the unsettled descendants another transaction has touched (xmax set),
--      in id order — the same global order drainers lock in, so no deadlock,
--      and no rollup_recheck row is locked while waiting (an arming drainer
--      never waits on us). A row its settler committed is re-checked on its new
--      version, found settled and not locked at all;
--   2. re-run the gate (schedule_candidates, re-pend mode) in a fresh snapshot
--      that now sees every sibling the arming transactions could not — for
--      every armed root but one whose rollup was pended through the gate
--      after it was armed (trigger childrenSettled, created_at >= armed_at)
--      and claimed: that pend saw every descendant settled, so the rollup
--      reads the subtree after the straddling settles and needs neither a
--      pend nor a rerun mark. Any other lease is marked rerun by the gate:
--      its read may predate them — a rollup pended before the arming and
--      claimed after it among them, since the arming drain can commit
--      before the other straddling settler does;
--   3. delete the rows that pended (or already have their reconcile row), no
--      longer need one (gone, frozen, deleting, not a composed rollup root) or
--      can no longer be straddled (an idle unsettled descendant remains: its
--      own settle will cascade), judged in the delete's own snapshot so a
--      settler that started meanwhile keeps the row armed; and rows armed
--      longer than 30 s: a root whose unsettled descendants stayed in
--      flight that long (a settling transaction held open, or an xmax the
--      probe misjudges: a MultiXactId). The expiry bounds the recheck's
--      work; nothing takes the root over. The reaper's requeue
--      (requeue_failed_and_pending) re-pends a lagging root only
--      (synced_gen < generation); a synced composite keeps the rollup it
--      has until the next settle in its subtree cascades to it, its kind's
--      resync or an edit of it.
-- An empty queue costs one index probe. Returns the number of roots pended.
CREATE OR REPLACE FUNCTION drain_rollup_rechecks(p_max int, p_lo int, p_hi int, p_now timestamptz DEFAULT now()) RETURNS int
LANGUAGE plpgsql SET jit = off AS $$
DECLARE
    v_armed uuid[];
    v_roots uuid[];
    v_top   uuid[];
    v_n     int;
BEGIN
    SELECT array_agg(x.root_id), array_agg(x.root_id) FILTER (WHERE NOT x.fresh) INTO v_armed, v_roots
      FROM (SELECT rr.root_id,
                   EXISTS (SELECT 1 FROM work_queue w
                            WHERE w.shard_id = rr.shard_id AND w.resource_id = rr.root_id
                              AND w.task_type = 'reconcile'
                              AND w.op_id = '00000000-0000-0000-0000-000000000000'
                              AND w.trigger = 'childrenSettled'
                              AND w.created_at >= rr.armed_at
                              AND w.leased_at >= rr.armed_at) AS fresh
              FROM rollup_recheck rr
             WHERE rr.shard_id BETWEEN p_lo AND p_hi
             ORDER BY rr.armed_at
             LIMIT p_max) x;
    IF v_armed IS NULL THEN
        RETURN 0;
    END IF;
    v_roots := coalesce(v_roots, '{}');

    SELECT array_agg(r.id) FILTER (WHERE r.root_id IS NULL) INTO v_top
      FROM resources r WHERE r.id = ANY (v_roots);
    -- The unsettled descendants come from the phase index; the locks are
    -- taken on their resources rows, which every settler locks first (the
    -- phase index entry is rewritten later, by the statement's trigger), so
    -- the wait is the same and no lock order is inverted. Their ids are
    -- gathered and sorted first, a top root's by a probe of the unsettled
    -- index per root, and each row is then probed by key and locked in
    -- that order (LATERAL … FOR SHARE, as drain_lock): as a join of the ids
    -- to resources, the rows were found by a Seq Scan of resources, or,
    -- under statistics taken while the fleet's tables were empty, by its
    -- primary key walked whole.
    PERFORM 1
       FROM (SELECT DISTINCT x.id
               FROM (SELECT u.id FROM unnest(v_top) AS t(root)
                      CROSS JOIN LATERAL (SELECT u.id FROM resource_phases u
                                           WHERE u.root_id = t.root AND u.phase = 'Reconciling'
                                          OFFSET 0) u
                     UNION ALL
                     SELECT x FROM resources r CROSS JOIN LATERAL descendant_ids(r.id) AS x
                      WHERE r.id = ANY (v_roots) AND r.root_id IS NOT NULL) x
              ORDER BY x.id) ids
      CROSS JOIN LATERAL (SELECT 1 FROM resources d
                           WHERE d.id = ids.id
                             AND d.synced_gen < d.generation AND d.failure_gen <> d.generation
                             AND d.frozen_until IS NULL AND d.deletion_requested_at IS NULL
                             AND d.xmax <> '0'::xid
                             FOR SHARE) l;

    v_n := schedule_candidates(v_roots, p_now, true);

    DELETE FROM rollup_recheck rr
     WHERE rr.root_id = ANY (v_armed)
       AND (rr.armed_at < p_now - interval '30 seconds'
            OR EXISTS (SELECT 1 FROM work_queue w
                        WHERE w.shard_id = rr.shard_id AND w.resource_id = rr.root_id
                          AND w.task_type = 'reconcile'
                          AND w.op_id = '00000000-0000-0000-0000-000000000000')
            OR NOT EXISTS (SELECT 1 FROM resources r
                             JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
                            WHERE r.id = rr.root_id AND kc.has_rollup
                              AND r.deletion_requested_at IS NULL AND r.frozen_until IS NULL
                              AND NOT (kc.has_composer AND r.composed_gen < r.generation)
                              AND rollup_gate(r.id, r.root_id IS NULL, 0) = 2));
    RETURN v_n;
END
$$;
