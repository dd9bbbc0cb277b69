-- 00007_requeue_walk: the reaper's catch-up pass with a plan that cannot go
-- quadratic, and bounded work per tick.
--
-- requeue_failed_and_pending anti-joined the lagging rows of its range with
-- the queue. Its plan was cached by plpgsql (generic after a few calls) and
-- was chosen while the tables were small; during a 100k-resource load it was
-- a nested loop that scanned queue partitions per lagging row, and one call
-- ran for over nine minutes — blocking every other reaper pass behind it.
-- With fresh statistics it is a hash anti-join that still reads every
-- reconcile row of the range (the whole queue on the 1M path) every tick.
--
-- Now: shard by shard (a LATERAL per shard of the range), walk at most
-- v_budget entries of idx_resources_lagging oldest first, and test each for
-- a queue row with one primary-key probe of its own partition (the queue's
-- key is (shard_id, resource_id, task_type, op_id): every column is bound).
-- The oldest p_max survivors across the range go through schedule_eligible
-- as before (the LIMIT 1 keeps each probe a probe: a NOT EXISTS may be
-- planned as a hash anti-join over the queue). A lagging row that already
-- has its task is exactly what a big backlog is full of, so the walk is what
-- bounds a tick's cost: at most
-- (hi - lo + 1) × v_budget probes, and only in the shards that lag at all.
-- Plans are custom per call (current statistics, the real range).

-- +goose Up

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION requeue_failed_and_pending(p_lo int, p_hi int, p_max int, p_retry_after interval,
                                                      p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan SET jit = off AS $$
DECLARE
    v_ids    uuid[];
    -- entries of idx_resources_lagging examined per shard per call
    v_budget int := greatest(p_max, 64);
BEGIN
    SELECT array_agg(c.id ORDER BY c.updated_at) INTO v_ids
      FROM (SELECT w.id, w.updated_at
              FROM generate_series(p_lo, p_hi) AS s(shard)
             CROSS JOIN LATERAL (
                    SELECT r.id, r.updated_at, r.shard_id
                      FROM resources r
                     WHERE r.shard_id = s.shard
                       AND r.synced_gen < r.generation
                       AND r.updated_at < p_now - p_retry_after
                     ORDER BY r.updated_at
                     LIMIT v_budget) l
             CROSS JOIN LATERAL (
                    SELECT r.id, r.updated_at
                      FROM resources r
                     WHERE r.id = l.id
                       AND r.frozen_until IS NULL
                       AND r.deletion_requested_at IS NULL
                       AND NOT (r.failure_terminal AND r.failure_gen = r.generation)
                    OFFSET 0) w
              LEFT JOIN LATERAL (
                    SELECT true AS queued
                      FROM work_queue q
                     WHERE q.shard_id BETWEEN p_lo AND p_hi
                       AND q.shard_id = l.shard_id AND q.resource_id = l.id
                       AND q.task_type = 'reconcile'
                       AND q.op_id = '00000000-0000-0000-0000-000000000000'
                     LIMIT 1) q ON true
             WHERE q.queued IS NULL
             ORDER BY w.updated_at
             LIMIT p_max) c;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    RETURN coalesce(schedule_eligible(v_ids, p_now), 0);
END
$$;
-- +goose StatementEnd

-- +goose Down

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION requeue_failed_and_pending(p_lo int, p_hi int, p_max int, p_retry_after interval,
                                                      p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    SELECT array_agg(c.id) INTO v_ids
      FROM (SELECT r.id
              FROM resources r
             WHERE r.shard_id BETWEEN p_lo AND p_hi
               AND r.synced_gen < r.generation
               AND r.updated_at < p_now - p_retry_after
               AND r.frozen_until IS NULL
               AND r.deletion_requested_at IS NULL
               AND NOT (r.failure_terminal AND r.failure_gen = r.generation)
               AND NOT EXISTS (SELECT 1 FROM work_queue q
                                WHERE q.shard_id BETWEEN p_lo AND p_hi
                                  AND q.shard_id = r.shard_id AND q.resource_id = r.id
                                  AND q.task_type = 'reconcile')
             ORDER BY r.updated_at
             LIMIT p_max) c;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    RETURN coalesce(schedule_eligible(v_ids, p_now), 0);
END
$$;
-- +goose StatementEnd
