-- cascade_on_ready_change: reactive scheduling, demotion and lifecycle emit.
-- AFTER UPDATE … FOR EACH STATEMENT on resources, with transition tables, so
-- a drain batch of a thousand rows runs it once.
--   * rows that newly reach synced_gen >= generation schedule their direct
--     edge-dependents (schedule_eligible: each waits on every upstream);
--   * a row whose settledness or health moved — newly synced, newly failed,
--     left the unsettled set (frozen, deleting), health flipped either way, or
--     recovered from a failure — re-evaluates the rollup-having owner and top
--     root it belongs to: a lagging root pends when its gate clears, a synced
--     one is re-pended with trigger childrenSettled so the composite demotes
--     (Degraded) and recovers reactively (a root whose reconcile is leased
--     is marked rerun instead: see schedule_candidates). Roots whose gate may have been
--     straddled by a concurrent drain are armed in rollup_recheck there (see
--     rollup_gate);
--   * lifecycle_outbox rows for synced / degraded / failed, one per matching
--     enabled binding, each behind an EXISTS short-circuit on the partial
--     idx_reactor_bindings_transition, so with no binding it is one probe and
--     no join; a direct pg_notify('lifecycle_ready') when rows were written.
--     Which edges fire when:
--       synced   — synced_gen newly reaches generation (the first rollup of a
--                  composite, the first successful work of a leaf), AND again
--                  for the same generation whenever a row that stays synced
--                  changes phase, health or status (a composite re-rolled up
--                  after a child recovered: Degraded → Ready). Every such edge
--                  carries the same dedup token <id>:synced:<gen>:<binding>
--                  and the latest snapshot, so an idempotent sink ends up
--                  holding the final rolled-up state of the generation;
--       degraded — the phase newly becomes Degraded;
--       failed   — a new failure is recorded for the generation.
--     A re-fired edge whose previous delivery is still queued or in flight
--     replaces it (ON CONFLICT: new snapshot, claim cleared), so the sink is
--     not left with the older state: an in-flight delivery's ack is then
--     fenced by its claim_epoch and the row is delivered again — to the
--     reactor its binding names now (a binding re-pointed while the row was
--     in flight left it under the old one, which the claim would drop).
-- Seq scans are off here, whatever the caller's settings: outside the drain
-- (whose force_custom_plan plans every call) a session keeps the plans it
-- made on its first calls, and a plan of the owners' and roots' probe made
-- on a fresh install's empty tables, by a caller that left seq scans on,
-- read resources by a Seq Scan for each of them, kept as the fleet grew
-- (TestPlans_TeardownSessionPlannedOnEmptyTables: a delete's mark fires
-- this trigger).
CREATE OR REPLACE FUNCTION cascade_on_ready_change() RETURNS trigger
LANGUAGE plpgsql SET jit = off SET enable_seqscan = off AS $$
DECLARE
    v_synced   boolean := EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'synced');
    v_degraded boolean := EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'degraded');
    v_failed   boolean := EXISTS (SELECT 1 FROM reactor_bindings WHERE enabled AND transition = 'failed');
    v_ch       ready_change[];
    v_deps     uuid[];
    v_roots    uuid[];
    v_life     int := 0;
BEGIN
    -- Fold the old and new side of each row with one aggregation: transition
    -- tables carry no statistics, and a join between them is planned as a
    -- nested loop, quadratic in the batch.
    SELECT array_agg(ROW(g.id, g.owner_id, g.root_id, g.kind, g.shard_id, g.generation, g.labels, g.newly_synced,
                         g.newly_synced OR g.left_unsettled OR g.health_flip OR g.failure_flip,
                         g.became_degraded, g.became_failed, g.snapshot, g.resynced)::ready_change)
      INTO v_ch
      FROM (SELECT x.id,
                   (array_agg(x.owner_id) FILTER (WHERE x.is_new))[1] AS owner_id,
                   (array_agg(x.root_id) FILTER (WHERE x.is_new))[1] AS root_id,
                   (array_agg(x.kind) FILTER (WHERE x.is_new))[1] AS kind,
                   max(x.shard_id) AS shard_id,
                   max(x.generation) FILTER (WHERE x.is_new) AS generation,
                   (array_agg(x.labels) FILTER (WHERE x.is_new))[1] AS labels,
                   (array_agg(x.snapshot) FILTER (WHERE x.is_new))[1] AS snapshot,
                   bool_or(x.is_new AND x.synced_gen >= x.generation)
                   AND max(x.synced_gen) FILTER (WHERE x.is_new) > max(x.synced_gen) FILTER (WHERE NOT x.is_new)
                       AS newly_synced,
                   bool_or(x.unsettled AND NOT x.is_new) AND NOT bool_or(x.unsettled AND x.is_new) AS left_unsettled,
                   bool_or(x.health_ok) <> bool_and(x.health_ok) AS health_flip,
                   bool_or(x.failed) <> bool_and(x.failed) AS failure_flip,
                   bool_or(x.is_new AND x.phase = 'Degraded') AND NOT bool_or(NOT x.is_new AND x.phase = 'Degraded')
                       AS became_degraded,
                   bool_or(x.is_new AND x.failed)
                   AND max(x.failure_gen) FILTER (WHERE x.is_new) <> max(x.failure_gen) FILTER (WHERE NOT x.is_new)
                       AS became_failed,
                   v_synced
                   AND bool_and(x.synced_gen >= x.generation)
                   AND max(x.generation) = min(x.generation)
                   AND (bool_or(x.health_ok) <> bool_and(x.health_ok)
                        OR (array_agg(x.phase) FILTER (WHERE x.is_new))[1]
                           IS DISTINCT FROM (array_agg(x.phase) FILTER (WHERE NOT x.is_new))[1]
                        OR (array_agg(x.status) FILTER (WHERE x.is_new))[1]
                           IS DISTINCT FROM (array_agg(x.status) FILTER (WHERE NOT x.is_new))[1])
                       AS resynced
              FROM (SELECT false AS is_new, o.id, o.owner_id, o.root_id, o.kind, o.shard_id, o.generation,
                           o.synced_gen, o.failure_gen, o.health_ok, o.phase, o.labels, NULL::jsonb AS snapshot,
                           CASE WHEN v_synced THEN o.status END AS status,
                           o.failure_gen = o.generation AS failed,
                           o.synced_gen < o.generation AND o.failure_gen <> o.generation
                           AND o.frozen_until IS NULL AND o.deletion_requested_at IS NULL AS unsettled
                      FROM old_rows o
                    UNION ALL
                    SELECT true, n.id, n.owner_id, n.root_id, n.kind, n.shard_id, n.generation,
                           n.synced_gen, n.failure_gen, n.health_ok, n.phase, n.labels,
                           CASE WHEN v_synced OR v_degraded OR v_failed THEN to_jsonb(n) END,
                           CASE WHEN v_synced THEN n.status END,
                           n.failure_gen = n.generation,
                           n.synced_gen < n.generation AND n.failure_gen <> n.generation
                           AND n.frozen_until IS NULL AND n.deletion_requested_at IS NULL
                      FROM new_rows n) x
             GROUP BY x.id) g
     WHERE g.newly_synced OR g.left_unsettled OR g.health_flip OR g.failure_flip
        OR g.became_degraded OR g.became_failed OR g.resynced;
    IF v_ch IS NULL THEN
        RETURN NULL;
    END IF;

    SELECT array_agg(DISTINCT d.dependent_id) INTO v_deps
      FROM unnest(v_ch) c
      CROSS JOIN LATERAL (SELECT d.dependent_id FROM resource_deps d WHERE d.dependency_id = c.id OFFSET 0) d
     WHERE c.newly_synced;
    SELECT array_agg(r.id) INTO v_roots
      FROM (SELECT c.owner_id AS id FROM unnest(v_ch) c WHERE c.rollup_event AND c.owner_id IS NOT NULL
            UNION
            SELECT c.root_id FROM unnest(v_ch) c WHERE c.rollup_event AND c.root_id IS NOT NULL) x
      CROSS JOIN LATERAL (SELECT r.id, r.kind, r.version FROM resources r WHERE r.id = x.id OFFSET 0) r
      JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
     WHERE kc.has_rollup;
    IF v_deps IS NOT NULL THEN
        PERFORM schedule_candidates(v_deps, now(), false);
    END IF;
    IF v_roots IS NOT NULL THEN
        PERFORM schedule_candidates(v_roots, now(), true);
    END IF;

    -- One insert for the three transitions: each row of the batch emits the
    -- transitions it crossed, once per matching enabled binding.
    IF v_synced OR v_degraded OR v_failed THEN
        INSERT INTO lifecycle_outbox (resource_id, transition, generation, binding_name, shard_id, reactor, watch_kind, snapshot)
        SELECT c.id, t.transition, c.generation, b.name, c.shard_id, b.reactor, c.kind, c.snapshot
          FROM unnest(v_ch) c
         CROSS JOIN LATERAL (VALUES ('synced', v_synced AND (c.newly_synced OR c.resynced)),
                                    ('degraded', v_degraded AND c.became_degraded),
                                    ('failed', v_failed AND c.became_failed)) t(transition, crossed)
          JOIN reactor_bindings b ON b.enabled AND b.transition = t.transition AND b.watch_kind = c.kind
                                 AND c.labels @> b.label_match
         WHERE t.crossed
        ON CONFLICT (resource_id, transition, generation, binding_name, shard_id) DO UPDATE
           SET snapshot = EXCLUDED.snapshot, reactor = EXCLUDED.reactor, worker_id = NULL, claim_epoch = NULL,
               heartbeat_at = NULL, created_at = now();
        GET DIAGNOSTICS v_life = ROW_COUNT;
    END IF;
    IF v_life > 0 THEN
        PERFORM pg_notify('lifecycle_ready', '');
    END IF;
    RETURN NULL;
END
$$;
