-- resync_resource: the operator's "re-observe now" (no generation bump).
-- A settled row gets a 'resync' reconcile task (recomposing when its kind's
-- resync_recomposes says so); a lagging row goes through schedule_eligible
-- (its upstream gate still applies). A no-op (false) for a missing, frozen
-- (quarantined or orphaned) or deleting row, or when a reconcile task is
-- already queued. Returns whether a task was enqueued.
CREATE OR REPLACE FUNCTION resync_resource(p_id uuid, p_now timestamptz DEFAULT now())
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_r resources%ROWTYPE;
    v_recompose boolean;
BEGIN
    SELECT * INTO v_r FROM resources WHERE id = p_id;
    IF NOT FOUND OR v_r.frozen_until IS NOT NULL OR v_r.deletion_requested_at IS NOT NULL THEN
        RETURN false;
    END IF;
    IF v_r.synced_gen < v_r.generation THEN
        RETURN coalesce(schedule_eligible(ARRAY[p_id], p_now), 0) > 0;
    END IF;
    SELECT resync_recomposes INTO v_recompose
      FROM kind_config WHERE kind = v_r.kind AND version = v_r.version;
    RETURN resync_enqueue(ARRAY[p_id], coalesce(v_recompose, false), p_now) > 0;
END
$$;
