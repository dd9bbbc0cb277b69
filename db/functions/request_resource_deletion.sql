-- request_resource_deletion: DELETE of a resource (the API, and the
-- composer's prune of a finalizer-kind child). Marks the teardown tree
-- (cascade_mark_for_deletion), then advances the whole tree once
-- (teardown_advance): its unblocked leaves' teardown tasks are queued, and a
-- finalizer-free subtree is removed, in this transaction, whatever the
-- tree's size and however many shards it spans. The drain advances the rest
-- as each teardown finishes; the reaper's sweep_deletable is the backstop.
-- Idempotent: a repeat marks nothing new and queues nothing twice.
-- Returns the number of rows newly marked (0 also for a missing id).
CREATE OR REPLACE FUNCTION request_resource_deletion(p_id uuid, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    v_n := cascade_mark_for_deletion(p_id, p_now);
    PERFORM teardown_advance(ARRAY(SELECT teardown_tree(p_id)), 0, 255, p_now, NULL);
    RETURN v_n;
END
$$;
