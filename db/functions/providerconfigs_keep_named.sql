-- providerconfigs_keep_named (BEFORE DELETE ON providerconfigs, per row, for
-- a composer-owned config: owner_id set) keeps a config that resources name
-- (provider_config_ref): deleted under them, they would reconcile, and be
-- torn down, with their kind's default config, silently. Every delete of an
-- owned config passes here — the compose's prune (writeConfigs) and the
-- cascade of its owner's delete — so none can leave a dangling ref. A
-- hand-authored config never reaches it: DeleteProviderConfig refuses while
-- the config is named.
--
-- The row's lock is held when this runs, and an apply that names the config
-- holds a share lock on it until it commits, so the probe sees every
-- committed namer. One probe of idx_resources_config_ref, counted to a bound.
--
-- * Named, its owner still there (the composition no longer emits it): the
--   delete is skipped and the config stays the root's; pruned_at marks it
--   and one Warning on the root names the resources (once per prune, not at
--   every compose). Once none names it, the reaper deletes it
--   (sweep_pruned_configs, through this trigger again), as does a later
--   compose; emitted again, it is the composition's again (pruned_at
--   cleared).
-- * Named, its owner deleted (the root's teardown): the config is handed
--   over — hand-authored from now on (owner_id NULL), its delete the user's —
--   and the resources naming it record a Warning saying so (the first 100
--   by name: the delete runs inside a teardown's drain, and a config a whole
--   fleet names must not turn it into a write per resource).
-- * Named by none: deleted; one it had kept (pruned_at set, its owner still
--   there) records a Normal ProviderConfigDeleted on the root, whichever
--   delete took it (the reaper's sweep_pruned_configs or a compose).
CREATE OR REPLACE FUNCTION providerconfigs_keep_named() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_ids   uuid[];
    v_names text[];
    v_count text;
    v_list  text;
BEGIN
    SELECT array_agg(r.id ORDER BY r.name), array_agg(r.name ORDER BY r.name) INTO v_ids, v_names
      FROM (SELECT r.id, r.name FROM resources r
             WHERE r.kind = OLD.kind AND r.provider_config_ref = OLD.name
             LIMIT 1001) r;
    IF v_names IS NULL THEN
        IF OLD.pruned_at IS NOT NULL AND EXISTS (SELECT 1 FROM resources r WHERE r.id = OLD.owner_id) THEN
            INSERT INTO resource_events (resource_id, type, reason, message)
            VALUES (OLD.owner_id, 'Normal', 'ProviderConfigDeleted',
                    format('providerconfig %s/%s, kept after this composition stopped emitting it, is deleted: '
                           'no resource names it any more', OLD.kind, OLD.name));
        END IF;
        RETURN OLD;
    END IF;
    v_count := CASE WHEN cardinality(v_names) > 1000 THEN 'more than 1000' ELSE cardinality(v_names)::text END;
    IF EXISTS (SELECT 1 FROM resources r WHERE r.id = OLD.owner_id) THEN
        IF OLD.pruned_at IS NULL THEN
            UPDATE providerconfigs SET pruned_at = now() WHERE id = OLD.id;
            SELECT string_agg(OLD.kind || '/' || n, ', ') INTO v_list FROM unnest(v_names[1:3]) AS n;
            IF cardinality(v_names) > 3 THEN
                v_list := v_list || ', …';
            END IF;
            INSERT INTO resource_events (resource_id, type, reason, message)
            VALUES (OLD.owner_id, 'Warning', 'ProviderConfigKept',
                    format('providerconfig %s/%s is no longer emitted by this composition but %s resource(s) name it (%s): '
                           'it is kept until none does', OLD.kind, OLD.name, v_count, v_list));
        END IF;
    ELSE
        UPDATE providerconfigs SET owner_id = NULL, pruned_at = NULL, updated_at = now() WHERE id = OLD.id;
        INSERT INTO resource_events (resource_id, type, reason, message)
        SELECT id, 'Warning', 'ProviderConfigReleased',
               format('providerconfig %s/%s, which this resource names, was owned by composition root %s, which is deleted: '
                      'it is kept as a hand-authored config for the %s resource(s) that name it', OLD.kind, OLD.name,
                      OLD.owner_id, v_count)
          FROM unnest(v_ids[1:100]) AS id;
    END IF;
    RETURN NULL;
END
$$;
