-- schedule_candidates: the body of the gate, shared by schedule_eligible
-- (p_repend = false) and the cascade / recheck (p_repend = true).
--
-- A candidate gets a `reconcile` work_queue row when
--   * it needs reconciling: generation > synced_gen — or, with p_repend, it is
--     a composed rollup root whose descendants changed (a re-pend with trigger
--     childrenSettled, so a composite demotes and recovers reactively);
--   * it is live: not deleting, not frozen (orphaned or quarantined);
--   * it is not terminally failed for its live spec;
--   * every upstream (resource_deps) has caught up: synced_gen >= generation;
--   * a rollup root whose compose is done (composed_gen >= generation, or a
--     kind with no composer) has every live descendant settled (rollup_gate).
-- The attached providerconfig (provider_config_ref) is snapshotted into the
-- row: spec → provider_config, data → provider_bundle. A candidate whose ref
-- names a config that does not exist is held, not queued with a NULL config
-- (the worker would use the kind's default): hold_config_missing records
-- Synced=False/ProviderConfigNotFound on it. The config is probed only for a
-- candidate with a ref (the probe's filter on the ref is a one-time filter:
-- a resource without one costs nothing more).
-- ON CONFLICT is gen-gated: only an unleased row is touched, and only to raise
-- its generation (which also resets its backoff, and takes the resource's
-- version: a live version migration bumps generation), so re-running is idempotent
-- and never disturbs a running task. One exception, which changes nothing of
-- the task: a re-pend (p_repend) of a rollup root whose gate is open but whose
-- reconcile is leased marks the lease rerun — its running rollup may have
-- read the subtree before this change — and the drain that finishes it sends
-- the root through this gate again. The mark rides the same key-ordered
-- statement, so it takes no lock the insert would not. Rows are written in key order, so two
-- drainers scheduling the same roots and dependents queue up rather than
-- deadlock. A rollup root that failed only the descendant gate is armed in
-- rollup_recheck when a straddle is possible — behind a transaction advisory
-- try-lock on the root, so two drainers arming the same root never wait on
-- each other's uncommitted insert: the loser skips, and the winner's recheck
-- waits out the loser's in-flight rows anyway.
-- Wakes: notify_gated('work_ready') when a row was written, a direct
-- pg_notify('rollup_recheck') when a root was armed.
-- The upstream gate is a LATERAL probe with LIMIT 1 per candidate
-- (resource_deps' primary key, then one resources primary-key probe per
-- upstream), never a NOT EXISTS the planner may turn into a hash of every
-- lagging resource built per call. The upstream and rollup predicates are
-- schedule_lagging_upstreams and schedule_rollup_gated (inlined SQL), the
-- definitions explain_resource shares to say why a resource waits.
-- Plans: every lookup is a primary-key (or edge-index) probe driven from the
-- distinct ids — LATERAL … OFFSET 0 subqueries and correlated sub-selects the
-- planner cannot turn into scans — so the cached plan is right whatever the
-- batch size and however stale the statistics of a fast-growing resources
-- table (a plan that trusted them would scan a partial index of lagging rows or the
-- whole table per batch). Seq scans are off as well: outside a drain (whose
-- force_custom_plan replans each call) a session keeps the generic plan it
-- made on its first calls, and on a fresh install those come on empty tables,
-- where a scan of resources and of the edges per candidate is the cheap plan;
-- kept while a bulk apply grew the edges, it read them whole for every
-- candidate until autovacuum's first ANALYZE (a 100k run: 4,060 scans, 115M
-- rows read). JIT is off: compiling costs more than running.
CREATE OR REPLACE FUNCTION schedule_candidates(p_ids uuid[], p_now timestamptz, p_repend boolean) RETURNS int
LANGUAGE plpgsql SET jit = off SET enable_seqscan = off AS $$
DECLARE
    v_n       int;
    v_armed   int;
    v_missing uuid[];
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH cand AS MATERIALIZED (
        SELECT q.id, q.shard_id, q.kind, q.version, q.generation, q.rollup_gated, q.config, q.bundle,
               q.provider_config_ref IS NOT NULL AND q.config IS NULL AS config_missing,
               CASE WHEN NOT q.rollup_gated THEN 0 ELSE rollup_gate(q.id, q.root_id IS NULL, 4) END AS gate
          FROM (SELECT r.id, r.shard_id, r.kind, r.version, r.generation, r.root_id, r.provider_config_ref,
                       g.rollup_gated, pc.spec AS config, pc.data AS bundle,
                       ub.blocked IS NULL AS upstream_ok
                  FROM (SELECT DISTINCT x.id FROM unnest(p_ids) AS x(id)) c
                  CROSS JOIN LATERAL (SELECT * FROM resources r WHERE r.id = c.id OFFSET 0) r
                  LEFT JOIN kind_config kc ON kc.kind = r.kind AND kc.version = r.version
                  CROSS JOIN LATERAL (
                      SELECT schedule_rollup_gated(kc.has_rollup, kc.has_composer, r.composed_gen, r.generation)
                             AS rollup_gated
                  ) g
                  LEFT JOIN LATERAL (
                      SELECT true AS blocked FROM schedule_lagging_upstreams(r.id) LIMIT 1) ub ON true
                  LEFT JOIN LATERAL (SELECT pc.spec, pc.data FROM providerconfigs pc
                                      WHERE r.provider_config_ref IS NOT NULL
                                        AND pc.kind = r.kind AND pc.name = r.provider_config_ref OFFSET 0) pc ON true
                 WHERE (r.synced_gen < r.generation OR (p_repend AND g.rollup_gated))
                   AND r.deletion_requested_at IS NULL
                   AND r.frozen_until IS NULL
                   AND NOT (r.failure_terminal AND r.failure_gen = r.generation)
                OFFSET 0) q
         WHERE q.upstream_ok
    ), ins AS (
        INSERT INTO work_queue AS w (resource_id, task_type, shard_id, kind, version, generation, trigger,
                                     provider_config, provider_bundle, not_before, created_at)
        SELECT c.id, 'reconcile', c.shard_id, c.kind, c.version, c.generation,
               CASE WHEN c.rollup_gated THEN 'childrenSettled' ELSE 'specChange' END,
               c.config, c.bundle, p_now, p_now
          FROM cand c
         WHERE c.gate = 0 AND NOT c.config_missing
         ORDER BY c.shard_id, c.id
        ON CONFLICT (shard_id, resource_id, task_type, op_id) DO UPDATE
           SET generation      = CASE WHEN w.worker_id IS NULL THEN EXCLUDED.generation ELSE w.generation END,
               version         = CASE WHEN w.worker_id IS NULL THEN EXCLUDED.version ELSE w.version END,
               trigger         = CASE WHEN w.worker_id IS NULL THEN EXCLUDED.trigger ELSE w.trigger END,
               provider_config = CASE WHEN w.worker_id IS NULL THEN EXCLUDED.provider_config ELSE w.provider_config END,
               provider_bundle = CASE WHEN w.worker_id IS NULL THEN EXCLUDED.provider_bundle ELSE w.provider_bundle END,
               attempts        = CASE WHEN w.worker_id IS NULL THEN 0 ELSE w.attempts END,
               not_before      = CASE WHEN w.worker_id IS NULL THEN EXCLUDED.not_before ELSE w.not_before END,
               rerun           = w.worker_id IS NOT NULL
         WHERE (w.worker_id IS NULL AND w.generation < EXCLUDED.generation)
            OR (p_repend AND w.worker_id IS NOT NULL AND NOT w.rerun AND EXCLUDED.trigger = 'childrenSettled')
        RETURNING w.worker_id IS NULL AS pended
    ), arm AS (
        INSERT INTO rollup_recheck AS rr (root_id, shard_id, armed_at)
        SELECT c.id, c.shard_id, p_now
          FROM cand c
         WHERE CASE WHEN c.gate = 2   -- CASE: take the lock only for a root being armed
                    THEN pg_try_advisory_xact_lock(hashtext('rollup_recheck'), hashtext(c.id::text)) END
         ORDER BY c.id
        ON CONFLICT (root_id) DO NOTHING
        RETURNING 1
    )
    SELECT (SELECT count(*) FILTER (WHERE pended) FROM ins), (SELECT count(*) FROM arm),
           (SELECT array_agg(c.id) FROM cand c WHERE c.gate = 0 AND c.config_missing)
      INTO v_n, v_armed, v_missing;
    IF v_missing IS NOT NULL THEN
        PERFORM hold_config_missing(v_missing, p_now);
    END IF;
    IF v_n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    IF v_armed > 0 THEN
        PERFORM pg_notify('rollup_recheck', '');
    END IF;
    RETURN v_n;
END
$$;
