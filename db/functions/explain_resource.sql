-- explain_resource: why a resource is not (yet) where its spec says — the
-- gates holding it, first the one that holds it now, each with what releases
-- it. No rows: nothing holds it (it is Ready or Degraded for its live spec,
-- and a config it names exists). A synced resource whose resync failed is
-- Failed for its live spec: its retry task's claim state is the answer, or,
-- when that task was lost, the reaper's retry (failed_retry).
-- It reads the scheduler's own definitions, never a copy of them:
--   * the upstream gate: schedule_lagging_upstreams;
--   * the rollup gate: schedule_rollup_gated, then rollup_gate (0 = open),
--     naming the unsettled descendants from the same phase index
--     (resource_phases, phase Reconciling);
--   * the claim's gates on a queued task: the lease (worker_id), the backoff
--     (not_before), the kind's cap (kind_cap_usage, what claim_budget spends)
--     and a live broker serving the kind version (live_cluster_members, its
--     kinds array as brokers report their ready workers);
--   * the liveness gates in the phase's order: deleting (sweep_deletable's
--     strict wait: owned children, then dependents, then the teardown task),
--     quarantined and orphaned (frozen_until), terminally failed;
--   * a providerConfigRef naming a config that does not exist
--     (explain_config_missing): every path that would queue the resource a
--     task holds it instead (hold_config_missing), so it is named after the
--     gates holding it first, in place of the answers whose backstops would
--     queue it nothing (not_queued, the delete sweep), and for a synced
--     resource, whose resyncs it holds.
-- A queued task is past the scheduler's gates already, so when one exists
-- its claim state is the answer; without one the gate that keeps the
-- scheduler from writing it is. Rows carry up to 20 blocker ids and their
-- total count; p_liveness_secs is the fleet's liveness window.
-- Read-only and bounded (index probes, at most 20 ids per row); not a hot
-- path: one call per Resource.waitingOn / `conctl why`. Seq scans are off:
-- a session keeps the plans of these statements, and one made on a fresh
-- install's small tables scanned resources and the phase rows on every
-- later call (TestPlans_APISessionPlannedOnEmptyTables); every row it reads
-- is reached by key, and the setting holds for the helpers it calls.
CREATE OR REPLACE FUNCTION explain_resource(p_id uuid, p_now timestamptz DEFAULT now(), p_liveness_secs int DEFAULT 30)
RETURNS TABLE (gate text, message text, since timestamptz, until_at timestamptz, blocker_ids uuid[],
               blocker_count bigint, in_flight bigint, cap int, broker_id text)
LANGUAGE plpgsql STABLE SET enable_seqscan = off AS $$
DECLARE
    r       record;
    kc      record;
    v_ids   uuid[];
    v_n     bigint;
    v_task  text;
    v_found boolean := false;
BEGIN
    SELECT * INTO r FROM resources WHERE id = p_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    SELECT k.has_rollup, k.has_composer INTO kc FROM kind_config k WHERE k.kind = r.kind AND k.version = r.version;

    IF r.deletion_requested_at IS NOT NULL THEN
        SELECT array_agg(x.id), max(x.n) INTO v_ids, v_n
          FROM (SELECT o.id, count(*) OVER () AS n FROM resources o WHERE o.owner_id = p_id ORDER BY o.id LIMIT 20) x;
        IF v_ids IS NOT NULL THEN
            RETURN QUERY SELECT 'deleting_children', format('deleting: waits for %s owned child(ren) to be deleted first', v_n),
                r.deletion_requested_at, NULL::timestamptz, v_ids, v_n, NULL::bigint, NULL::int, NULL::text;
        END IF;
        SELECT array_agg(x.id), max(x.n) INTO v_ids, v_n
          FROM (SELECT d.dependent_id AS id, count(*) OVER () AS n FROM resource_deps d
                 WHERE d.dependency_id = p_id ORDER BY d.dependent_id LIMIT 20) x;
        IF v_ids IS NOT NULL THEN
            RETURN QUERY SELECT 'deleting_dependents',
                format('deleting: waits for %s dependent(s) to be deleted first (strict wait)', v_n),
                r.deletion_requested_at, NULL::timestamptz, v_ids, v_n, NULL::bigint, NULL::int, NULL::text;
        END IF;
        IF EXISTS (SELECT 1 FROM resources o WHERE o.owner_id = p_id)
           OR EXISTS (SELECT 1 FROM resource_deps d WHERE d.dependency_id = p_id) THEN
            IF r.finalizers <> '{}' THEN  -- its teardown, once unblocked
                RETURN QUERY SELECT * FROM explain_config_missing(p_id, 'delete');
            END IF;
            RETURN;
        END IF;
        IF r.finalizers = '{}' THEN
            RETURN QUERY SELECT 'deleting_sweep', 'deleting: unblocked, waits for the delete sweep to remove the row',
                r.deletion_requested_at, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
            RETURN;
        END IF;
        v_task := 'delete';
        IF NOT EXISTS (SELECT 1 FROM work_queue w WHERE w.shard_id BETWEEN r.shard_id AND r.shard_id
                          AND w.resource_id = p_id AND w.task_type = 'delete') THEN
            RETURN QUERY SELECT * FROM explain_config_missing(p_id, 'delete');
            IF FOUND THEN  -- the sweep queues no teardown for it
                RETURN;
            END IF;
            RETURN QUERY SELECT 'deleting_sweep',
                format('deleting: unblocked, waits for the delete sweep to queue its teardown (finalizers %s)',
                       array_to_string(r.finalizers, ', ')),
                r.deletion_requested_at, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
            RETURN;
        END IF;
        RETURN QUERY SELECT 'deleting_teardown',
            format('deleting: its teardown task runs the finalizers %s', array_to_string(r.finalizers, ', ')),
            r.deletion_requested_at, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
    ELSIF r.frozen_until = 'infinity' THEN
        RETURN QUERY SELECT 'quarantined', 'quarantined: frozen from every scheduler until an operator lifts it (unquarantine)',
            r.updated_at, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
        RETURN;
    ELSIF r.frozen_until IS NOT NULL THEN
        RETURN QUERY SELECT 'orphaned',
            CASE WHEN r.frozen_until > p_now
                 THEN 'orphaned: its owner no longer composes it; deleted when the grace ends unless re-adopted'
                 ELSE 'orphaned: its owner no longer composes it and its grace ended: the reaper''s orphan sweep '
                      'starts its delete on its next pass unless it is re-adopted first' END,
            r.updated_at, r.frozen_until, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
        RETURN;
    ELSIF r.failure_terminal AND r.failure_gen = r.generation THEN
        RETURN QUERY SELECT 'failed_terminal',
            format('failed terminally at generation %s: not retried until the spec changes', r.generation),
            r.updated_at, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
        RETURN;
    ELSIF r.synced_gen >= r.generation THEN
        v_n := 0;
        IF r.failure_gen = r.generation THEN
            -- Failed for its live spec while synced: a resync that failed,
            -- retried by its own task (backing off, then claimed again)
            RETURN QUERY SELECT * FROM explain_task(p_id, r.shard_id, r.kind, r.version, 'reconcile', p_now,
                                                    p_liveness_secs);
            GET DIAGNOSTICS v_n = ROW_COUNT;
        END IF;
        RETURN QUERY SELECT * FROM explain_config_missing(p_id, 'resync');
        IF r.failure_gen <> r.generation OR v_n > 0 OR FOUND THEN
            RETURN;
        END IF;
        -- Its task lost (a crash emptied the queue, or the unclaimed-work GC
        -- dropped it): the reaper's retry, below, is the answer.
        v_task := 'resync';
    ELSE
        v_task := 'reconcile';
    END IF;

    IF v_task <> 'resync' THEN
        IF v_task = 'reconcile' AND coalesce(kc.has_composer, false) AND r.composed_gen < r.generation THEN
            RETURN QUERY SELECT 'composing', format('composing: the composer has not expanded generation %s yet', r.generation),
                r.updated_at, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
        END IF;
        RETURN QUERY SELECT * FROM explain_task(p_id, r.shard_id, r.kind, r.version, v_task, p_now, p_liveness_secs);
        GET DIAGNOSTICS v_n = ROW_COUNT;
        IF v_n > 0 OR v_task = 'delete' THEN
            RETURN;
        END IF;

        -- No task: the gate that keeps the scheduler from writing one. A
        -- failed row's retry window holds it only when no upstream or
        -- descendant does: the reaper's retry goes through the gate, and the
        -- upstream's sync (or the descendants' settling) schedules it through
        -- its cascade anyway.
        SELECT array_agg(x.dependency_id), max(x.n) INTO v_ids, v_n
          FROM (SELECT u.dependency_id, count(*) OVER () AS n FROM schedule_lagging_upstreams(p_id) u
                 ORDER BY u.dependency_id LIMIT 20) x;
        IF v_ids IS NOT NULL THEN
            v_found := true;
            RETURN QUERY SELECT 'upstream', format('waits for %s upstream(s) to sync their spec', v_n),
                NULL::timestamptz, NULL::timestamptz, v_ids, v_n, NULL::bigint, NULL::int, NULL::text;
        END IF;
        IF schedule_rollup_gated(kc.has_rollup, kc.has_composer, r.composed_gen, r.generation)
           AND rollup_gate(p_id, r.root_id IS NULL, 0) > 0 THEN
            v_found := true;
            SELECT array_agg(x.id), max(x.n) INTO v_ids, v_n
              FROM (SELECT u.id, count(*) OVER () AS n FROM explain_unsettled(p_id, r.root_id IS NULL) u
                     ORDER BY u.id LIMIT 20) x;
            RETURN QUERY SELECT 'descendants',
                format('rollup: waits for %s descendant(s) to settle (synced or failed)', coalesce(v_n, 0)),
                NULL::timestamptz, NULL::timestamptz, v_ids, coalesce(v_n, 0), NULL::bigint, NULL::int, NULL::text;
        END IF;
    END IF;
    -- Failed with no task and nothing else holding it (a synced row here has
    -- lost its resync's task, its config exists): requeue_failed_and_pending
    -- queues it again after its retry window.
    IF r.failure_gen = r.generation AND NOT v_found THEN
        v_found := true;
        RETURN QUERY SELECT 'failed_retry',
            format('failed at generation %s: the reaper retries it after its retry window', r.generation),
            r.updated_at, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
    END IF;
    IF v_task = 'resync' THEN
        RETURN;
    END IF;
    RETURN QUERY SELECT * FROM explain_config_missing(p_id, 'reconcile');
    IF NOT v_found AND NOT FOUND THEN
        RETURN QUERY SELECT 'not_queued', 'eligible but no task is queued: the reaper re-pends it on its next pass',
            r.updated_at, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
    END IF;
END
$$;
