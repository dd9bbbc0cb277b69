-- claimable_pairs: the broker's idle failsafe poll. For each (kind, version,
-- task type) given (p_kinds[i], p_versions[i], p_task_types[i]), whether
-- shards [p_lo, p_hi] hold a claimable row of it — pending and due — as the
-- 1-based ordinals of the pairs that do. One round trip however many pairs
-- the broker serves; it claims nothing.
--
-- A LIMIT 1 probe of idx_work_queue_pending per pair, in the index's own
-- order, which is what keeps it on the index: written as an EXISTS it was
-- planned as a hash semi-join over a Seq Scan of every partition, the whole
-- queue read on every idle poll. It runs here, not as a top-level
-- statement, for claim_span's reason: a partition analyzed while its rows
-- were all dead looks empty to the planner whatever it holds, and at zero
-- rows a bitmap scan of the primary key over the range's shards looked as
-- cheap as the probe, reading every row of the partition on every poll.
-- With seq scans, bitmap scans and sorts off, the ordered probe is the one
-- path left. Planned for each call with its arguments, so the range prunes
-- to its partitions when planning.
CREATE OR REPLACE FUNCTION claimable_pairs(p_kinds text[], p_versions text[], p_task_types text[],
                                           p_lo int, p_hi int, p_now timestamptz)
RETURNS int[] LANGUAGE plpgsql STABLE
SET plan_cache_mode = force_custom_plan SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_sort = off SET jit = off AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(x.i::int ORDER BY x.i), '{}')
              FROM unnest(p_kinds, p_versions, p_task_types) WITH ORDINALITY AS x(kind, version, task_type, i)
             CROSS JOIN LATERAL (SELECT 1 FROM work_queue w
                                  WHERE w.kind = x.kind AND w.version = x.version AND w.task_type = x.task_type
                                    AND w.worker_id IS NULL AND w.not_before <= p_now
                                    AND w.shard_id BETWEEN p_lo AND p_hi
                                  ORDER BY w.not_before
                                  LIMIT 1) e);
END
$$;
