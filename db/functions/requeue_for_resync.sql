-- requeue_for_resync: the drift engine. Re-pends settled rows (phase Ready or
-- Degraded: synced, not failed, not frozen, not deleting) of one resync-enabled
-- kind in [p_lo, p_hi] whose last reconcile or resync is older than p_interval,
-- oldest first, at most p_max. No generation bump: the worker re-observes and
-- the drainer may flip health_ok out of band.
--
-- Zero cost for kinds that do not opt in: the first statement is one PK probe
-- on kind_config (resync_interval_secs > 0) and returns 0. For an opted-in
-- kind the scan reads the kind's settled rows through the phase index
-- (idx_resource_phases_kind_page) and each row's times by primary key (no
-- extra index taxes the hot write path of kinds that never resync).
-- Returns the number of tasks enqueued.
-- Seq scans are off: a session keeps the generic plan it made on its first
-- calls, on a fresh install's empty tables, where a scan is the cheap plan;
-- kept while a bulk apply grows the table, it would read it whole on every
-- tick until an ANALYZE (TestPlans_ReaperSessionPlannedOnEmptyTables).
CREATE OR REPLACE FUNCTION requeue_for_resync(p_kind text, p_version text, p_lo int, p_hi int, p_interval interval,
                                   p_recompose boolean, p_max int, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_ids uuid[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM kind_config
                    WHERE kind = p_kind AND version = p_version AND resync_interval_secs > 0) THEN
        RETURN 0;
    END IF;
    SELECT array_agg(c.id) INTO v_ids
      FROM (SELECT r.id
              FROM resource_phases p
             CROSS JOIN LATERAL (
                    SELECT r.id, r.updated_at, r.last_resync_at
                      FROM resources r
                     WHERE r.id = p.id
                       AND r.version = p_version
                       AND greatest(r.updated_at, r.last_resync_at) < p_now - p_interval
                    OFFSET 0) r
             WHERE p.kind = p_kind
               AND p.phase IN ('Ready', 'Degraded')
               AND p.shard_id BETWEEN p_lo AND p_hi
             ORDER BY greatest(r.updated_at, r.last_resync_at)
             LIMIT p_max) c;
    RETURN resync_enqueue(v_ids, p_recompose, p_now);
END
$$;
