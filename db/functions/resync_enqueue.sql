-- resync_enqueue (internal): enqueue a 'resync' reconcile task for each given
-- settled, live row (no generation bump) and stamp last_resync_at. A row that
-- already has a reconcile task (pending or leased) is left alone: that task
-- observes it anyway. The task is an ordinary reconcile at the row's current
-- generation with trigger = 'resync'; the provider config is cloned onto it as
-- schedule_eligible does. A row whose ref names a config that does not exist
-- gets no task (it would run with the kind's default config): it is held
-- (hold_config_missing) and stamped all the same, so it does not come first
-- again in every pass.
--
-- Recompose: with p_recompose the row's composed_gen is lowered below its
-- generation. The reconcile pipeline runs the composer exactly when
-- composed_gen < generation, and the drainer sets composed_gen = generation
-- when the compose result lands, so the task needs no extra field: "this
-- resync recomposes" is carried by the row itself.
--
-- The stamp compares its key as "r.id = ANY (ARRAY[ins.resource_id])", an
-- equality the planner can neither merge nor hash on, with seq scans off:
-- the loop over the queued rows probing the primary key is the only plan
-- without a disabled node. As "r.id = ins.resource_id", with the fleet's
-- statistics taken while it was empty (a fleet torn down and analyzed,
-- another applied), it walked the whole primary key for the join: 13,800
-- buffers to stamp 100 rows of a 10k fleet
-- (TestPlans_ReaperWalksKeepTheirPlans, "emptied fleet").
CREATE OR REPLACE FUNCTION resync_enqueue(p_ids uuid[], p_recompose boolean, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_n       int;
    v_missing uuid[];
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH due AS MATERIALIZED (
        SELECT r.id, r.shard_id, r.kind, r.version, r.generation, pc.spec, pc.data,
               r.provider_config_ref IS NOT NULL AND pc.kind IS NULL AS missing
          FROM resources r
          LEFT JOIN providerconfigs pc ON pc.kind = r.kind AND pc.name = r.provider_config_ref
         WHERE r.id = ANY (p_ids)
           AND r.synced_gen >= r.generation
           AND r.frozen_until IS NULL
           AND r.deletion_requested_at IS NULL
    ), ins AS (
        INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, trigger,
                                provider_config, provider_bundle, not_before)
        SELECT d.id, 'reconcile', d.shard_id, d.kind, d.version, d.generation, 'resync', d.spec, d.data, p_now
          FROM due d
         WHERE NOT d.missing
        ON CONFLICT (shard_id, resource_id, task_type, op_id) DO NOTHING
        RETURNING resource_id
    ), stamped AS (
        UPDATE resources r
           SET last_resync_at = p_now,
               composed_gen = CASE WHEN p_recompose AND NOT s.missing THEN least(r.composed_gen, r.generation - 1)
                                   ELSE r.composed_gen END
          FROM (SELECT ins.resource_id AS id, false AS missing FROM ins
                UNION ALL
                SELECT d.id, true FROM due d WHERE d.missing) s
         WHERE r.id = ANY (ARRAY[s.id])
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM ins), (SELECT array_agg(d.id) FROM due d WHERE d.missing)
      INTO v_n, v_missing;
    IF v_missing IS NOT NULL THEN
        PERFORM hold_config_missing(v_missing, p_now);
    END IF;
    IF v_n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN v_n;
END
$$;
