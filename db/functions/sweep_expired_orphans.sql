-- sweep_expired_orphans: orphan-grace expiry. Composer-dropped rows in
-- [p_lo, p_hi] whose grace deadline passed (frozen_until < p_now — never a
-- quarantined 'infinity' row) and that nobody re-adopted are escalated to the
-- real delete, oldest deadline first, at most p_max:
--   * a kind with a finalizer (kind_config.finalizer_name), or a row that owns
--     children → the soft-delete protocol (cascade_mark_for_deletion, then
--     teardown_advance over the marked trees), so every Deleter runs in order;
--   * a leaf kind without a finalizer → hard delete (teardown_remove); its
--     dependents lose their edge with it, and go through the gate
--     (schedule_eligible) in the same transaction, as a compose's prune
--     sends them: the gate may have opened, and nothing else would send
--     them before the reaper's lagging walk.
-- Idle gate: one probe of idx_resources_frozen_sweep below p_now (empty in
-- steady state; quarantined rows sort above any finite instant). Candidates
-- are locked SKIP LOCKED. Returns the number of orphans escalated.
-- Seq scans are off: a session keeps the generic plan it made on its first
-- calls, on a fresh install's empty tables, where a scan is the cheap plan;
-- kept while a bulk apply grows the table, it would read it whole on every
-- tick until an ANALYZE (TestPlans_ReaperSessionPlannedOnEmptyTables).
CREATE OR REPLACE FUNCTION sweep_expired_orphans(p_lo int, p_hi int, p_max int, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_soft uuid[];
    v_hard uuid[];
    v_freed uuid[];
    v_id   uuid;
    v_n    int := 0;
BEGIN
    -- The idle gate reads the first entry of idx_resources_frozen_sweep in
    -- its order, so no plan but that one-entry probe is cheap: a bare
    -- EXISTS (… frozen_until < p_now) was planned, without statistics (a
    -- bulk load), as a Seq Scan of resources that on an idle fleet reads
    -- every row.
    IF coalesce((SELECT r.frozen_until FROM resources r WHERE r.frozen_until IS NOT NULL
                  ORDER BY r.frozen_until LIMIT 1) >= p_now, true) THEN
        RETURN 0;
    END IF;
    SELECT array_agg(c.id) FILTER (WHERE c.soft), array_agg(c.id) FILTER (WHERE NOT c.soft)
      INTO v_soft, v_hard
      FROM (SELECT r.id,
                   (EXISTS (SELECT 1 FROM kind_config kc
                             WHERE kc.kind = r.kind AND kc.version = r.version AND kc.finalizer_name IS NOT NULL)
                    -- OFFSET 0: a per-row owner probe, never a hashed
                    -- subplan over a Seq Scan of resources
                    OR EXISTS (SELECT 1 FROM resources o WHERE o.owner_id = r.id OFFSET 0)) AS soft
              FROM resources r
             WHERE r.frozen_until < p_now
               AND r.shard_id BETWEEN p_lo AND p_hi
               AND r.deletion_requested_at IS NULL
             ORDER BY r.frozen_until
             LIMIT p_max
             FOR UPDATE OF r SKIP LOCKED) c;

    IF v_hard IS NOT NULL THEN
        -- the teardown's own hard delete: each row by its primary key, its
        -- queue rows with it (on_resources_deleted)
        -- read before the delete's cascade removes their edges
        SELECT array_agg(DISTINCT d.dependent_id) INTO v_freed
          FROM unnest(v_hard) h(id)
         CROSS JOIN LATERAL (SELECT d.dependent_id FROM resource_deps d
                              WHERE d.dependency_id = h.id OFFSET 0) d
         WHERE d.dependent_id <> ALL (v_hard);
        v_n := v_n + teardown_remove(v_hard);
        IF v_freed IS NOT NULL THEN
            PERFORM schedule_eligible(v_freed, p_now);
        END IF;
    END IF;
    IF v_soft IS NOT NULL THEN
        FOREACH v_id IN ARRAY v_soft LOOP
            PERFORM cascade_mark_for_deletion(v_id, p_now);
        END LOOP;
        PERFORM teardown_advance(ARRAY(SELECT t.id FROM unnest(v_soft) s(id) CROSS JOIN LATERAL teardown_tree(s.id) t(id)),
                                 0, 255, p_now, NULL);
        v_n := v_n + cardinality(v_soft);
    END IF;
    RETURN v_n;
END
$$;
