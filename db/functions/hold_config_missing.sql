-- hold_config_missing: the resources p_ids, each of which names a
-- providerconfig (provider_config_ref) that does not exist, are held rather
-- than dispatched: a task snapshots its config, and one without it runs with
-- the kind's default config — another account's credentials, silently. Nothing
-- new can leave a ref dangling (the API checks a ref on apply, a compose
-- refuses a missing one, DeleteProviderConfig refuses a named config and
-- providerconfigs_keep_named keeps an owned one), but a ref left dangling
-- before those checks can still reach the gate. Callers (schedule_candidates,
-- resync_enqueue, teardown_advance) leave such a resource unqueued and call
-- this, which records why on the resource: condition Synced=False, reason
-- ProviderConfigNotFound, naming the config — written on transition only
-- (an unchanged condition is neither rewritten nor locked), in id order. The reaper's
-- backstops (requeue_failed_and_pending for a lagging resource,
-- sweep_deletable for a delete) send it through the gate again, so a config
-- applied under that name is picked up within their window; the clean
-- reconcile that follows clears the condition (drain_conditions).
CREATE OR REPLACE FUNCTION hold_config_missing(p_ids uuid[], p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_conditions AS c (resource_id, type, status, reason, message, observed_generation,
                                          last_transition_time)
    SELECT h.id, 'Synced', 'False', 'ProviderConfigNotFound', h.message, h.generation, p_now
      FROM (SELECT r.id, r.generation,
                   format('providerconfig %s/%s, which providerConfigRef names, does not exist: the resource is held '
                          '(neither reconciled nor torn down with its kind''s default config) until a config of that name is applied',
                          r.kind, r.provider_config_ref) AS message
              FROM (SELECT DISTINCT x.id FROM unnest(p_ids) AS x(id)) x
              JOIN resources r ON r.id = x.id
             WHERE r.provider_config_ref IS NOT NULL) h
       -- already held so: no write, and no row lock (an ON CONFLICT update
       -- locks the row it then skips), so the reaper's retries of a held
       -- resource never wait on a drain's cascade holding it too
     WHERE NOT EXISTS (SELECT 1 FROM resource_conditions k
                        WHERE k.resource_id = h.id AND k.type = 'Synced' AND k.status = 'False'
                          AND k.reason = 'ProviderConfigNotFound' AND k.observed_generation = h.generation
                          AND k.message = h.message)
     ORDER BY h.id
    ON CONFLICT (resource_id, type) DO UPDATE
       SET status               = EXCLUDED.status,
           reason               = EXCLUDED.reason,
           message              = EXCLUDED.message,
           observed_generation  = EXCLUDED.observed_generation,
           last_transition_time = CASE WHEN c.status = EXCLUDED.status THEN c.last_transition_time
                                       ELSE EXCLUDED.last_transition_time END
     WHERE (c.status, c.reason, c.message, c.observed_generation)
           IS DISTINCT FROM (EXCLUDED.status, EXCLUDED.reason, EXCLUDED.message, EXCLUDED.observed_generation);
END
$$;
