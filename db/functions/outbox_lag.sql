-- outbox_lag: how long the oldest result in shards [p_lo, p_hi] has waited
-- in work_outbox for the drain, in microseconds (0 when none waits). The
-- brokers pace their claims on it: a claim made while results wait longer
-- than the bound only lengthens the wait of everything behind it. The
-- read is the head of each partition's idx_work_outbox_fifo, merged in id
-- order, stopping at the first row: one index probe a partition however
-- long the backlog. The other order, the primary key's range sorted by id,
-- would sort the whole backlog; a planner that believes the outbox empty
-- (statistics from before a load) picks it, so sorting is off here.
CREATE OR REPLACE FUNCTION outbox_lag(p_lo int, p_hi int, p_now timestamptz DEFAULT now())
RETURNS bigint LANGUAGE sql STABLE SET enable_sort = off SET jit = off AS $$
    SELECT coalesce((SELECT greatest(0, (extract(epoch FROM p_now - o.created_at) * 1e6)::bigint)
                       FROM work_outbox o
                      WHERE o.shard_id BETWEEN p_lo AND p_hi
                      ORDER BY o.id
                      LIMIT 1), 0)
$$;
