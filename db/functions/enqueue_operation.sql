-- enqueue_operation: run an operator verb on a resource. Records a Pending
-- resource_operations row and queues its operate task (op_id = the
-- operation), snapshotting the attached providerconfig like the gate does.
-- Refuses an unknown resource (no_data_found), one being deleted
-- (object_not_in_prerequisite_state), a verb its kind does not declare
-- (invalid_parameter_value) and a resource whose providerConfigRef names a
-- config that does not exist (object_not_in_prerequisite_state): its task
-- would run with the kind's default config (hold_config_missing says how such
-- a ref can still exist).
CREATE OR REPLACE FUNCTION enqueue_operation(p_resource uuid, p_verb text, p_input jsonb) RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_r      resources%ROWTYPE;
    v_id     uuid;
    v_config jsonb;
    v_bundle jsonb;
BEGIN
    SELECT * INTO v_r FROM resources WHERE id = p_resource FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'no_data_found', MESSAGE = format('resource %s not found', p_resource);
    END IF;
    IF v_r.deletion_requested_at IS NOT NULL THEN
        RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
            MESSAGE = format('resource %s/%s is being deleted', v_r.kind, v_r.name);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM kind_manifest m, jsonb_array_elements(m.manifest->'reactions') x
                    WHERE m.kind = v_r.kind AND m.version = v_r.version
                      AND x->>'trigger' = 'operation' AND x->>'verb' = p_verb) THEN
        RAISE EXCEPTION USING ERRCODE = 'invalid_parameter_value',
            MESSAGE = format('kind %s/%s declares no operation verb %L', v_r.kind, v_r.version, p_verb);
    END IF;
    IF v_r.provider_config_ref IS NOT NULL THEN
        SELECT pc.spec, pc.data INTO v_config, v_bundle
          FROM providerconfigs pc WHERE pc.kind = v_r.kind AND pc.name = v_r.provider_config_ref;
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'object_not_in_prerequisite_state',
                MESSAGE = format('providerconfig %s/%s, which providerConfigRef names, does not exist: '
                                 'apply it before running an operation', v_r.kind, v_r.provider_config_ref);
        END IF;
    END IF;
    INSERT INTO resource_operations (resource_id, verb, input) VALUES (p_resource, p_verb, p_input)
    RETURNING id INTO v_id;
    INSERT INTO work_queue (resource_id, task_type, op_id, shard_id, kind, version, generation, trigger,
                            provider_config, provider_bundle)
    VALUES (v_r.id, 'operate', v_id, v_r.shard_id, v_r.kind, v_r.version, v_r.generation, 'operation',
            v_config, v_bundle);
    PERFORM notify_gated('work_ready');
    RETURN v_id;
END
$$;
