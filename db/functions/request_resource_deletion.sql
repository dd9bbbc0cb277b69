-- request_resource_deletion: DELETE of a resource (the API, and the
-- composer's prune of a finalizer-kind child). Marks the teardown tree
-- (cascade_mark_for_deletion), then kicks sweep_deletable once over the whole
-- shard range [0, 255] — the tree spans arbitrary shards — so its unblocked
-- leaves start tearing down now rather than on the next reaper tick (which is
-- the backstop). Idempotent: a repeat marks nothing new but still kicks.
-- Returns the number of rows newly marked (0 also for a missing id).
CREATE OR REPLACE FUNCTION request_resource_deletion(p_id uuid, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    v_n := cascade_mark_for_deletion(p_id, p_now);
    PERFORM sweep_deletable(0, 255, 1000, p_now);
    RETURN v_n;
END
$$;
