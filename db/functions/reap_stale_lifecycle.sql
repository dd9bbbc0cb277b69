-- reap_stale_lifecycle: reactor-delivery crash recovery. A claimed
-- lifecycle_outbox row in [p_lo, p_hi] whose dispatcher heartbeat is older
-- than p_stale_after is re-armed (claim cleared) so the next claim delivers it
-- again: at-least-once, per binding row (a sibling binding's row is never
-- touched). A row its binding no longer selects (lifecycle_selected: the
-- binding re-pointed, disabled or deleted while the row was in flight) is
-- deleted instead: re-armed, it would wait under the reactor the binding
-- left. Returns how many it re-armed. The live dispatcher heartbeats its claims, so a slow reactor is
-- not reaped. Reads only claimed rows (idx_lifecycle_outbox_claimed); wakes
-- the reactor dispatchers with a DIRECT pg_notify('lifecycle_ready') like
-- every lifecycle wake (never notify_gated).
CREATE OR REPLACE FUNCTION reap_stale_lifecycle(p_lo int, p_hi int, p_stale_after interval, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    WITH stale AS (
        SELECT l.resource_id, l.transition, l.generation, l.binding_name, l.shard_id,
               lifecycle_selected(l.binding_name, l.reactor, l.watch_kind, l.transition, l.snapshot) AS live
          FROM lifecycle_outbox l
         WHERE l.shard_id BETWEEN p_lo AND p_hi
           AND l.worker_id IS NOT NULL
           AND coalesce(l.heartbeat_at, '-infinity') < p_now - p_stale_after
         FOR UPDATE OF l SKIP LOCKED
    ), freed AS (
        UPDATE lifecycle_outbox l
           SET worker_id = NULL, claim_epoch = NULL, heartbeat_at = NULL
          FROM stale s
         WHERE s.live AND l.shard_id BETWEEN p_lo AND p_hi
           AND l.shard_id = s.shard_id AND l.resource_id = s.resource_id
           AND l.transition = s.transition AND l.generation = s.generation
           AND l.binding_name = s.binding_name
        RETURNING 1
    ), dropped AS (
        DELETE FROM lifecycle_outbox l
         USING stale s
         WHERE NOT s.live AND l.shard_id BETWEEN p_lo AND p_hi
           AND l.shard_id = s.shard_id AND l.resource_id = s.resource_id
           AND l.transition = s.transition AND l.generation = s.generation
           AND l.binding_name = s.binding_name
    )
    SELECT count(*) INTO v_n FROM freed;
    IF v_n > 0 THEN
        PERFORM pg_notify('lifecycle_ready', '');
    END IF;
    RETURN v_n;
END
$$;
