-- recount_inflight: the concurrency cap's self-heal. For every capped kind
-- (kind_config.max_inflight > 0) count its leased work_queue rows in
-- [p_lo, p_hi] (idx_work_queue_leased, pruned to the range's partitions),
-- delete every kind_inflight partial whose range_lo falls in [p_lo, p_hi]
-- (the claimers' finer hints and any earlier recount) and write one
-- authoritative partial keyed range_lo = p_lo. The truth comes from the queue,
-- so completions, reaped leases and lost decrements all heal within one
-- reaper interval. No-op (0) when no kind is capped. Returns the number of
-- partials written.
CREATE OR REPLACE FUNCTION recount_inflight(p_lo int, p_hi int)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM kind_config WHERE max_inflight > 0) THEN
        RETURN 0;
    END IF;
    DELETE FROM kind_inflight WHERE range_lo BETWEEN p_lo AND p_hi;
    INSERT INTO kind_inflight AS k (kind, version, range_lo, in_flight)
    SELECT kc.kind, kc.version, p_lo, coalesce(l.n, 0)
      FROM kind_config kc
      LEFT JOIN (SELECT q.kind, q.version, count(*) AS n
                   FROM work_queue q
                  WHERE q.shard_id BETWEEN p_lo AND p_hi
                    AND q.worker_id IS NOT NULL
                  GROUP BY q.kind, q.version) l
        ON l.kind = kc.kind AND l.version = kc.version
     WHERE kc.max_inflight > 0
    ON CONFLICT (kind, version, range_lo) DO UPDATE SET in_flight = EXCLUDED.in_flight;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
