-- reap_stale_lifecycle: reactor-delivery crash recovery. A claimed
-- lifecycle_outbox row in [p_lo, p_hi] whose dispatcher heartbeat is older
-- than p_stale_after is re-armed (claim cleared) so the next claim delivers it
-- again: at-least-once, per binding row (a sibling binding's row is never
-- touched). The live dispatcher heartbeats its claims, so a slow reactor is
-- not reaped. Reads only claimed rows (idx_lifecycle_outbox_claimed); wakes
-- the reactor dispatchers with a DIRECT pg_notify('lifecycle_ready') like
-- every lifecycle wake (never notify_gated).
CREATE OR REPLACE FUNCTION reap_stale_lifecycle(p_lo int, p_hi int, p_stale_after interval, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    WITH stale AS (
        SELECT resource_id, transition, generation, binding_name, shard_id
          FROM lifecycle_outbox
         WHERE shard_id BETWEEN p_lo AND p_hi
           AND worker_id IS NOT NULL
           AND coalesce(heartbeat_at, '-infinity') < p_now - p_stale_after
         FOR UPDATE SKIP LOCKED
    ), freed AS (
        UPDATE lifecycle_outbox l
           SET worker_id = NULL, claim_epoch = NULL, heartbeat_at = NULL
          FROM stale s
         WHERE l.shard_id BETWEEN p_lo AND p_hi
           AND l.shard_id = s.shard_id AND l.resource_id = s.resource_id
           AND l.transition = s.transition AND l.generation = s.generation
           AND l.binding_name = s.binding_name
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM freed;
    IF v_n > 0 THEN
        PERFORM pg_notify('lifecycle_ready', '');
    END IF;
    RETURN v_n;
END
$$;
