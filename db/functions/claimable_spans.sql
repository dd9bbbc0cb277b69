-- claimable_spans: which of a claim's shard spans hold a claimable row of
-- one (kind, version, task type) — pending and due — as the 1-based
-- ordinals of the spans given (p_los[i], p_his[i]: each inside one
-- work_queue partition). Claim asks it first when its range crosses
-- partitions, so an idle pair costs one round trip, not one per partition.
--
-- One parameterised LIMIT 1 probe of idx_work_queue_pending per span;
-- run-time pruning visits only that span's partition. The ORDER BY is the
-- index's own order, and what makes the planner take it: without it the
-- probe was planned as a bitmap scan of the queue's primary key over the
-- span's shards — every row of the partition, leased or pending, about 50
-- buffers a span at 3,000 rows a partition and growing with the queue (at
-- 1M resources, the statement the broker spent most of its time in); with
-- it, a few buffers a span whatever the queue holds. The plan is generic
-- and cached for the session: planned per call (as a top-level statement
-- whose span bounds arrive in arrays, so no partition can be pruned when
-- planning), the statement costed the planning of all sixteen partitions'
-- indexes every time — at 300k resources more time than the probe itself,
-- on about one call in twelve leaves. Seq scans are off: the generic plan is
-- made again after each ANALYZE of a partition, and one made while the
-- partitions were empty (a fresh install; the queue drained empty after a
-- fleet's creation, before its rollout or teardown filled it again) sorted
-- each span's partition read whole, kept while the queue grew (a test
-- claims across two partitions in a session planned on empty tables:
-- TestPlans_BrokerSessionPlannedOnEmptyTables).
CREATE OR REPLACE FUNCTION claimable_spans(p_kind text, p_version text, p_task_type text,
                                           p_los int[], p_his int[], p_now timestamptz)
RETURNS int[] LANGUAGE plpgsql STABLE SET plan_cache_mode = force_generic_plan SET enable_seqscan = off SET jit = off AS $$
BEGIN
    RETURN (SELECT coalesce(array_agg(x.i::int ORDER BY x.i), '{}')
              FROM unnest(p_los, p_his) WITH ORDINALITY AS x(lo, hi, i)
             CROSS JOIN LATERAL (SELECT 1 FROM work_queue w
                                  WHERE w.shard_id BETWEEN x.lo AND x.hi
                                    AND w.kind = p_kind AND w.version = p_version AND w.task_type = p_task_type
                                    AND w.worker_id IS NULL AND w.not_before <= p_now
                                  ORDER BY w.not_before
                                  LIMIT 1) e);
END
$$;
