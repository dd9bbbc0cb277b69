-- lease_release: gives back unfinished the leases of the given keys that
-- worker p_worker holds in shards [p_lo, p_hi] (a span inside one
-- partition): lease and claim_epoch NULLed (a late result is fenced out),
-- claimable again at once; a capped kind's slots are given back to the
-- partial keyed p_range_lo (the one its claims bumped). Returns how many
-- rows it locked and how many it released. Locked by key (lease_lock) and
-- stamped by TID in their own partition, for lease_heartbeat's reason.
CREATE OR REPLACE FUNCTION lease_release(p_lo int, p_hi int, p_shards int[], p_ids uuid[], p_types text[],
                                         p_ops uuid[], p_worker text, p_range_lo int,
                                         OUT locked int, OUT changed int)
LANGUAGE plpgsql VOLATILE SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_part regclass;
    v_tids tid[];
BEGIN
    SELECT l.part, l.tids INTO v_part, v_tids FROM lease_lock(p_lo, p_hi, p_shards, p_ids, p_types, p_ops, p_worker) l;
    locked := coalesce(cardinality(v_tids), 0);
    changed := 0;
    IF locked > 0 THEN
        EXECUTE format($sql$
        WITH rel AS (
            UPDATE %s w
               SET worker_id = NULL, claim_epoch = NULL, leased_at = NULL, heartbeat_at = NULL
             WHERE w.ctid = ANY ($1)
            RETURNING w.kind, w.version
        ), cap AS (
            INSERT INTO kind_inflight AS k (kind, version, range_lo, in_flight)
            SELECT rel.kind, rel.version, $2, -count(*)
              FROM rel JOIN kind_config kc ON kc.kind = rel.kind AND kc.version = rel.version
             WHERE kc.max_inflight > 0
             GROUP BY rel.kind, rel.version
            ON CONFLICT (kind, version, range_lo) DO UPDATE SET in_flight = k.in_flight + EXCLUDED.in_flight
        )
        SELECT count(*)::int FROM rel$sql$, v_part) INTO changed USING v_tids, p_range_lo;
    END IF;
END
$$;
