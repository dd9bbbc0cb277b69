-- record_spec_history: keep the resource's applied generation — its spec,
-- labels, provider config ref and kind version as they are now — in
-- resource_spec_history, then prune it to the kind's kind_config.history_limit
-- newest generations (0 keeps none). Called by every apply that writes
-- (create, spec or labels change, a migration to another version of its
-- kind) and by rollbackResource, in the apply's transaction; a labels-only
-- apply rewrites its generation's row. p_from is the generation a rollback
-- copied (NULL otherwise). Returns the rows pruned.
CREATE OR REPLACE FUNCTION record_spec_history(p_id uuid, p_reason text, p_actor text, p_from bigint DEFAULT NULL,
                                               p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_limit int;
    v_gen   bigint;
    v_n     int;
BEGIN
    SELECT coalesce(kc.history_limit, 20), r.generation INTO v_limit, v_gen
      FROM resources r LEFT JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
     WHERE r.id = p_id;
    IF NOT FOUND THEN
        RETURN 0;
    END IF;
    IF v_limit > 0 THEN
        INSERT INTO resource_spec_history AS h (resource_id, generation, spec, labels, provider_config_ref,
                                                version, reason, actor, rolled_back_from, created_at)
        SELECT r.id, r.generation, r.spec, r.labels, r.provider_config_ref, r.version, p_reason, p_actor, p_from,
               p_now
          FROM resources r WHERE r.id = p_id
        ON CONFLICT (resource_id, generation) DO UPDATE
           SET spec = EXCLUDED.spec, labels = EXCLUDED.labels, provider_config_ref = EXCLUDED.provider_config_ref,
               version = EXCLUDED.version, reason = EXCLUDED.reason, actor = EXCLUDED.actor,
               rolled_back_from = coalesce(EXCLUDED.rolled_back_from, h.rolled_back_from),
               created_at = EXCLUDED.created_at;
    END IF;
    DELETE FROM resource_spec_history h
     WHERE h.resource_id = p_id
       AND h.generation NOT IN (SELECT k.generation FROM resource_spec_history k
                                 WHERE k.resource_id = p_id ORDER BY k.generation DESC LIMIT v_limit);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
