-- explain_config_missing: explain_resource's providerconfig hold. One row
-- when resource p_id's providerConfigRef names a providerconfig that does
-- not exist, none otherwise (no ref, or its config exists). Every path that
-- would queue such a resource a task — the gate (schedule_candidates), the
-- resync (resync_enqueue), the teardown (teardown_advance), an operation
-- (enqueue_operation) — holds it instead, recording Synced=False, reason
-- ProviderConfigNotFound (hold_config_missing), so the config holds whatever
-- the resource waits for next: p_task names it for the message (reconcile,
-- delete, or resync for a synced resource). since is when the hold recorded
-- its condition (null before any path did). Released by applying a config of
-- that name: the reaper's backstops send the resource through its gate again.
-- Two key probes (the resource, the config), one more for the condition.
CREATE OR REPLACE FUNCTION explain_config_missing(p_id uuid, p_task text)
RETURNS TABLE (gate text, message text, since timestamptz, until_at timestamptz, blocker_ids uuid[],
               blocker_count bigint, in_flight bigint, cap int, broker_id text)
LANGUAGE sql STABLE AS $$
    SELECT 'provider_config_missing',
           format('providerconfig %s/%s, which providerConfigRef names, does not exist: %s held (never run with '
                  'its kind''s default config) until a config of that name is applied',
                  r.kind, r.provider_config_ref,
                  CASE p_task WHEN 'delete' THEN 'its teardown is'
                              WHEN 'resync' THEN 'its resyncs and operations are'
                              ELSE 'its reconcile is' END),
           c.last_transition_time, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text
      FROM resources r
      LEFT JOIN resource_conditions c
             ON c.resource_id = r.id AND c.type = 'Synced' AND c.status = 'False' AND c.reason = 'ProviderConfigNotFound'
     WHERE r.id = p_id
       AND r.provider_config_ref IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM providerconfigs pc WHERE pc.kind = r.kind AND pc.name = r.provider_config_ref)
$$;
