-- drain_outbox_batch: the drainer's entry point (core/store/pipeline calls it).
-- Drains up to p_max results in shards [p_lo, p_hi] as one batch
-- (drain_outbox_range); p_now defaults to now() so tests drive the clock.
-- Returns the number of outbox rows popped.
CREATE OR REPLACE FUNCTION drain_outbox_batch(p_max int, p_lo int, p_hi int, p_now timestamptz DEFAULT now()) RETURNS int
LANGUAGE sql AS $$
    SELECT drain_outbox_range(p_max, p_lo, p_hi, p_now)
$$;
