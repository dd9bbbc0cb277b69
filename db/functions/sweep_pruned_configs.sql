-- sweep_pruned_configs: the reaper's pass for kept providerconfigs. A
-- composer-owned config its composition stopped emitting while resources
-- named it is kept, still the root's, with pruned_at set
-- (providerconfigs_keep_named); once no resource names it any more — the
-- last one re-pointed or deleted — nothing else would delete it but the
-- root's next compose, which may never come. This deletes each such config,
-- oldest prune first, at most p_max; the keep-named trigger records a Normal
-- event, ProviderConfigDeleted, on its root. Returns how many it deleted.
--
-- Cost: idx_providerconfigs_pruned (partial: empty in steady state) read in
-- order, one probe of idx_resources_config_ref per kept config, the owner by
-- its key. Nothing on the hot path pays for it: a status write or a compose
-- never reads it.
--
-- Concurrency: every control pod runs it; a config (or its root) another
-- transaction holds is skipped (SKIP LOCKED) and left to a later pass, so
-- this pass never waits on a lock and two passes never delete one config.
-- The root is locked FOR KEY SHARE with its config: its delete waits for
-- this pass (and its cascade then finds the config gone) rather than
-- deleting the row the event names. The delete passes the keep-named
-- trigger like every delete of an owned config, so a resource that came to
-- name the config after this statement's snapshot keeps it (then the row
-- is not deleted, and no event is written); an apply naming it holds a
-- share lock on it until it commits, so it is skipped meanwhile.
CREATE OR REPLACE FUNCTION sweep_pruned_configs(p_max int) RETURNS int
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    v_n int;
BEGIN
    WITH cand AS MATERIALIZED (
        SELECT p.id
          FROM providerconfigs p
          JOIN resources o ON o.id = p.owner_id
         WHERE p.pruned_at IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM resources r WHERE r.kind = p.kind AND r.provider_config_ref = p.name)
         ORDER BY p.pruned_at, p.id
         LIMIT p_max
           FOR UPDATE OF p SKIP LOCKED
           FOR KEY SHARE OF o SKIP LOCKED
    ), gone AS (
        DELETE FROM providerconfigs p
         USING cand c
         WHERE p.id = c.id
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM gone;
    RETURN v_n;
END
$$;
