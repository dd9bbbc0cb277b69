-- requeue_lost_operations: the crash catch-up's part for operator verbs.
-- An operation and its operate task are written together (enqueue_operation)
-- and finished together (the drain), so an open operation (Pending or
-- Running) without its work_queue row lost it: a crash restart of Postgres
-- empties the UNLOGGED queue, and requeue_failed_and_pending rebuilds only
-- what the resources' generations say. For the open operations of resources
-- in [p_lo, p_hi], at most p_max, oldest first:
--   * a Pending one (never claimed: it never ran) gets its task again, as
--     enqueue_operation writes it;
--   * a Running one (claimed: its verb may have run) and one whose resource
--     is being deleted are finished as Failed, the error saying why: a verb
--     is not run twice unasked;
--   * so is a Pending one whose resource's ref names a providerconfig that
--     does not exist: its task would run with the kind's default config
--     (enqueue_operation refuses such a resource too).
-- Reads idx_resource_operations_open (one probe when none is open), each
-- operation's resource and queue row by key (a LATERAL … LIMIT 1 probe: as
-- a NOT EXISTS, planned on small tables, the queue's primary key was read
-- over the whole range for each operation). The statement's one snapshot
-- sees an operation and its task both or neither, so an operation enqueued
-- or finished meanwhile is never taken for lost. Returns the number of tasks
-- queued again.
CREATE OR REPLACE FUNCTION requeue_lost_operations(p_lo int, p_hi int, p_max int, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_n int;
BEGIN
    WITH lost AS MATERIALIZED (
        SELECT o.id, o.state, r.id AS resource_id, r.shard_id, r.kind, r.version, r.generation,
               r.provider_config_ref, r.deletion_requested_at IS NOT NULL AS deleting,
               pc.spec AS config, pc.data AS bundle,
               r.provider_config_ref IS NOT NULL AND pc.kind IS NULL AS config_missing
          FROM resource_operations o
         CROSS JOIN LATERAL (SELECT r.* FROM resources r WHERE r.id = o.resource_id OFFSET 0) r
          LEFT JOIN LATERAL (SELECT pc.kind, pc.spec, pc.data FROM providerconfigs pc
                              WHERE r.provider_config_ref IS NOT NULL
                                AND pc.kind = r.kind AND pc.name = r.provider_config_ref OFFSET 0) pc ON true
          LEFT JOIN LATERAL (SELECT true AS queued FROM work_queue q
                              WHERE q.shard_id BETWEEN p_lo AND p_hi
                                AND q.shard_id = r.shard_id AND q.resource_id = r.id
                                AND q.task_type = 'operate' AND q.op_id = o.id
                              LIMIT 1) q ON true
         WHERE o.state IN ('Pending', 'Running')
           AND r.shard_id BETWEEN p_lo AND p_hi
           AND q.queued IS NULL
         ORDER BY o.created_at
         LIMIT p_max
           FOR UPDATE OF o SKIP LOCKED
    ), requeued AS (
        INSERT INTO work_queue (resource_id, task_type, op_id, shard_id, kind, version, generation, trigger,
                                provider_config, provider_bundle, not_before, created_at)
        SELECT l.resource_id, 'operate', l.id, l.shard_id, l.kind, l.version, l.generation, 'operation',
               l.config, l.bundle, p_now, p_now
          FROM lost l
         WHERE l.state = 'Pending' AND NOT l.deleting AND NOT l.config_missing
        ON CONFLICT (shard_id, resource_id, task_type, op_id) DO NOTHING
        RETURNING 1
    ), refused AS (
        UPDATE resource_operations o
           SET state = 'Failed',
               error = CASE WHEN l.deleting
                            THEN 'lost: its task was lost in a database restart, and the resource is being deleted'
                            WHEN l.state = 'Pending'
                            THEN format('lost: its task was lost in a database restart, and providerconfig %s/%s, '
                                        'which providerConfigRef names, does not exist: request it again once it is applied',
                                        l.kind, l.provider_config_ref)
                            ELSE 'lost: its task was lost in a database restart while it ran; the verb may have run, '
                                 'so it is not run again: request it again if it should run' END,
               finished_at = p_now,
               updated_at = p_now
          FROM lost l
         WHERE o.id = l.id AND (l.state = 'Running' OR l.deleting OR l.config_missing)
    )
    SELECT count(*) INTO v_n FROM requeued;
    IF v_n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN v_n;
END
$$;
