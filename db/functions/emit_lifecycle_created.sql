-- emit_lifecycle_created: lifecycle_outbox 'created' rows for inserted
-- resources with a matching enabled binding (behind the EXISTS short-circuit).
CREATE OR REPLACE FUNCTION emit_lifecycle_created() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'created') THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT n.id, 'created', n.generation, b.name, n.shard_id, b.reactor, n.kind, to_jsonb(n)
          FROM new_rows n
          JOIN reactor_bindings b ON b.enabled AND b.transition = 'created' AND b.watch_kind = n.kind
                                 AND n.labels @> b.label_match
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            PERFORM pg_notify('lifecycle_ready', '');
        END IF;
    END IF;
    RETURN NULL;
END
$$;
