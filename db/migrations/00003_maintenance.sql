-- 00003_maintenance: the reaper's passes and the operator set-aside verbs.
--
--   catch-up      requeue_failed_and_pending, requeue_for_resync, resync_resource
--   queue GC      reap_stale_work, delete_unclaimed_work, reap_stale_lifecycle
--   teardown      cascade_mark_for_deletion, request_resource_deletion,
--                 sweep_deletable, sweep_expired_orphans
--   set-aside     quarantine_resource, unquarantine_resource
--   caps          recount_inflight
--   fleet         assign_member_shards, gc_stale_cluster_members
--
-- Every pass that scans a sharded table takes a contiguous shard range and
-- filters shard_id BETWEEN p_lo AND p_hi (never = ANY(array)) so the planner
-- prunes work_queue / lifecycle_outbox to the partitions that hold the range.
-- Every time-dependent function takes p_now timestamptz DEFAULT now() so tests
-- drive the clock. Passes that run every reaper tick start with an idle gate:
-- a probe on a partial index that is empty (or tiny) in steady state.
--
-- Scheduling itself (schedule_eligible, the claim, the drain, the cascade)
-- lives in 00002_scheduling.sql; the functions here call schedule_eligible by
-- name (plpgsql binds at run time) so a catch-up obeys exactly the same gate.

-- +goose Up

-- ---------------------------------------------------------------------------
-- last_resync_at: when requeue_for_resync (or resync_resource) last re-pended
-- the row for a drift re-observe. The resync cadence is
-- greatest(updated_at, last_resync_at) + interval: a row re-pends at most once
-- per interval however long its worker takes, and a lost task (the queue is
-- UNLOGGED) re-pends one interval later. Stamped only by the resync path, so
-- the drainer's hot write path is unchanged and no index is added.
ALTER TABLE resources ADD COLUMN last_resync_at timestamptz;

-- ---------------------------------------------------------------------------
-- requeue_failed_and_pending: the reaper backstop for lagging rows.
--
-- Gates: rows in [p_lo, p_hi] whose spec is ahead of what was reconciled
-- (synced_gen < generation — idx_resources_lagging, empty in steady state, so
-- the scan is its own idle gate), untouched for p_retry_after (a failed
-- reconcile is retried only after its window), with no reconcile row in the
-- queue (the queue is UNLOGGED: after a crash this rebuilds it). Skips
-- terminally failed rows (failure_terminal AND failure_gen = generation: they
-- stop retrying until a spec edit bumps generation), frozen rows (orphaned or
-- quarantined) and deleting rows. The survivors go through schedule_eligible,
-- the one gate: upstreams must be synced, and a rollup root waits only for
-- still-progressing descendants (a failed descendant does not hold it back).
-- Returns how many reconcile tasks schedule_eligible enqueued.
-- +goose StatementBegin
CREATE FUNCTION requeue_failed_and_pending(p_lo int, p_hi int, p_max int, p_retry_after interval,
                                           p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    SELECT array_agg(c.id) INTO v_ids
      FROM (SELECT r.id
              FROM resources r
             WHERE r.shard_id BETWEEN p_lo AND p_hi
               AND r.synced_gen < r.generation
               AND r.updated_at < p_now - p_retry_after
               AND r.frozen_until IS NULL
               AND r.deletion_requested_at IS NULL
               AND NOT (r.failure_terminal AND r.failure_gen = r.generation)
               AND NOT EXISTS (SELECT 1 FROM work_queue q
                                WHERE q.shard_id BETWEEN p_lo AND p_hi
                                  AND q.shard_id = r.shard_id AND q.resource_id = r.id
                                  AND q.task_type = 'reconcile')
             ORDER BY r.updated_at
             LIMIT p_max) c;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    RETURN coalesce(schedule_eligible(v_ids, p_now), 0);
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- resync_enqueue (internal): enqueue a 'resync' reconcile task for each given
-- settled, live row (no generation bump) and stamp last_resync_at. A row that
-- already has a reconcile task (pending or leased) is left alone: that task
-- observes it anyway. The task is an ordinary reconcile at the row's current
-- generation with trigger = 'resync'; the provider config is cloned onto it as
-- schedule_eligible does.
--
-- Recompose: with p_recompose the row's composed_gen is lowered below its
-- generation. The reconcile pipeline runs the composer exactly when
-- composed_gen < generation, and the drainer sets composed_gen = generation
-- when the compose result lands, so the task needs no extra field: "this
-- resync recomposes" is carried by the row itself.
-- +goose StatementBegin
CREATE FUNCTION resync_enqueue(p_ids uuid[], p_recompose boolean, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN 0;
    END IF;
    WITH ins AS (
        INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, trigger,
                                provider_config, provider_bundle, not_before)
        SELECT r.id, 'reconcile', r.shard_id, r.kind, r.version, r.generation, 'resync', pc.spec, pc.data, p_now
          FROM resources r
          LEFT JOIN providerconfigs pc ON pc.kind = r.kind AND pc.name = r.provider_config_ref
         WHERE r.id = ANY (p_ids)
           AND r.synced_gen >= r.generation
           AND r.frozen_until IS NULL
           AND r.deletion_requested_at IS NULL
        ON CONFLICT (shard_id, resource_id, task_type, op_id) DO NOTHING
        RETURNING resource_id
    ), stamped AS (
        UPDATE resources r
           SET last_resync_at = p_now,
               composed_gen = CASE WHEN p_recompose THEN least(r.composed_gen, r.generation - 1)
                                   ELSE r.composed_gen END
          FROM ins
         WHERE r.id = ins.resource_id
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM stamped;
    IF v_n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- requeue_for_resync: the drift engine. Re-pends settled rows (phase Ready or
-- Degraded: synced, not failed, not frozen, not deleting) of one resync-enabled
-- kind in [p_lo, p_hi] whose last reconcile or resync is older than p_interval,
-- oldest first, at most p_max. No generation bump: the worker re-observes and
-- the drainer may flip health_ok out of band.
--
-- Zero cost for kinds that do not opt in: the first statement is one PK probe
-- on kind_config (resync_interval_secs > 0) and returns 0. For an opted-in
-- kind the scan reads the kind's settled rows through idx_resources_kind_phase_page
-- (no extra index taxes the hot write path of kinds that never resync).
-- Returns the number of tasks enqueued.
-- +goose StatementBegin
CREATE FUNCTION requeue_for_resync(p_kind text, p_version text, p_lo int, p_hi int, p_interval interval,
                                   p_recompose boolean, p_max int, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM kind_config
                    WHERE kind = p_kind AND version = p_version AND resync_interval_secs > 0) THEN
        RETURN 0;
    END IF;
    SELECT array_agg(c.id) INTO v_ids
      FROM (SELECT r.id
              FROM resources r
             WHERE r.kind = p_kind
               AND r.phase IN ('Ready', 'Degraded')
               AND r.version = p_version
               AND r.shard_id BETWEEN p_lo AND p_hi
               AND greatest(r.updated_at, r.last_resync_at) < p_now - p_interval
             ORDER BY greatest(r.updated_at, r.last_resync_at)
             LIMIT p_max) c;
    RETURN resync_enqueue(v_ids, p_recompose, p_now);
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- resync_resource: the operator's "re-observe now" (no generation bump).
-- A settled row gets a 'resync' reconcile task (recomposing when its kind's
-- resync_recomposes says so); a lagging row goes through schedule_eligible
-- (its upstream gate still applies). A no-op (false) for a missing, frozen
-- (quarantined or orphaned) or deleting row, or when a reconcile task is
-- already queued. Returns whether a task was enqueued.
-- +goose StatementBegin
CREATE FUNCTION resync_resource(p_id uuid, p_now timestamptz DEFAULT now())
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_r resources%ROWTYPE;
    v_recompose boolean;
BEGIN
    SELECT * INTO v_r FROM resources WHERE id = p_id;
    IF NOT FOUND OR v_r.frozen_until IS NOT NULL OR v_r.deletion_requested_at IS NOT NULL THEN
        RETURN false;
    END IF;
    IF v_r.synced_gen < v_r.generation THEN
        RETURN coalesce(schedule_eligible(ARRAY[p_id], p_now), 0) > 0;
    END IF;
    SELECT resync_recomposes INTO v_recompose
      FROM kind_config WHERE kind = v_r.kind AND version = v_r.version;
    RETURN resync_enqueue(ARRAY[p_id], coalesce(v_recompose, false), p_now) > 0;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- reap_stale_work: dead-worker recovery. A leased work_queue row in
-- [p_lo, p_hi] whose heartbeat (or, never beaten, its lease) is older than
-- p_stale_after belongs to a worker that died: free it (worker_id, lease,
-- heartbeat and claim_epoch cleared, claimable now) for re-claim. Clearing
-- claim_epoch fences the dead worker's late result out of the drain. The scan
-- reads only leased rows (idx_work_queue_leased) of the pruned partitions and
-- skips rows a claimer or the drain holds (SKIP LOCKED). Returns the number
-- freed; wakes the dispatchers when any.
-- +goose StatementBegin
CREATE FUNCTION reap_stale_work(p_lo int, p_hi int, p_stale_after interval, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    WITH stale AS (
        SELECT shard_id, resource_id, task_type, op_id
          FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi
           AND worker_id IS NOT NULL
           AND coalesce(heartbeat_at, leased_at, '-infinity') < p_now - p_stale_after
         FOR UPDATE SKIP LOCKED
    ), freed AS (
        UPDATE work_queue q
           SET worker_id = NULL, claim_epoch = NULL, leased_at = NULL, heartbeat_at = NULL,
               not_before = p_now
          FROM stale s
         WHERE q.shard_id BETWEEN p_lo AND p_hi
           AND q.shard_id = s.shard_id AND q.resource_id = s.resource_id
           AND q.task_type = s.task_type AND q.op_id = s.op_id
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM freed;
    IF v_n > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- delete_unclaimed_work: abandoned-work GC. Hard-deletes work_queue rows in
-- [p_lo, p_hi] that have been claimable (worker_id IS NULL) since before
-- p_now - p_after: work no worker ever picked up because its kind lost its
-- workers. Not abandonment: the resource stays lagging and
-- requeue_failed_and_pending re-enqueues it if a worker ever returns (a delete
-- task is re-enqueued by sweep_deletable). "Claimable since" is not_before
-- (reap_stale_work resets it when it frees a lease, so a once-claimed row
-- restarts its clock). Idle gate: a LIMIT 1 probe of the pruned partitions'
-- pending rows (idx_work_queue_pending); SKIP LOCKED never waits on a claimer.
-- +goose StatementBegin
CREATE FUNCTION delete_unclaimed_work(p_lo int, p_hi int, p_after interval DEFAULT interval '24 hours',
                                      p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM work_queue
                    WHERE shard_id BETWEEN p_lo AND p_hi
                      AND worker_id IS NULL
                      AND not_before < p_now - p_after) THEN
        RETURN 0;
    END IF;
    WITH doomed AS (
        SELECT shard_id, resource_id, task_type, op_id
          FROM work_queue
         WHERE shard_id BETWEEN p_lo AND p_hi
           AND worker_id IS NULL
           AND not_before < p_now - p_after
         FOR UPDATE SKIP LOCKED
    ), gone AS (
        DELETE FROM work_queue q
         USING doomed d
         WHERE q.shard_id BETWEEN p_lo AND p_hi
           AND q.shard_id = d.shard_id AND q.resource_id = d.resource_id
           AND q.task_type = d.task_type AND q.op_id = d.op_id
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM gone;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- reap_stale_lifecycle: reactor-delivery crash recovery. A claimed
-- lifecycle_outbox row in [p_lo, p_hi] whose dispatcher heartbeat is older
-- than p_stale_after is re-armed (claim cleared) so the next claim delivers it
-- again: at-least-once, per binding row (a sibling binding's row is never
-- touched). The live dispatcher heartbeats its claims, so a slow reactor is
-- not reaped. Reads only claimed rows (idx_lifecycle_outbox_claimed); wakes
-- the reactor dispatchers with a DIRECT pg_notify('lifecycle_ready') like
-- every lifecycle wake (never notify_gated).
-- +goose StatementBegin
CREATE FUNCTION reap_stale_lifecycle(p_lo int, p_hi int, p_stale_after interval, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    WITH stale AS (
        SELECT resource_id, transition, generation, binding_name, shard_id
          FROM lifecycle_outbox
         WHERE shard_id BETWEEN p_lo AND p_hi
           AND worker_id IS NOT NULL
           AND coalesce(heartbeat_at, '-infinity') < p_now - p_stale_after
         FOR UPDATE SKIP LOCKED
    ), freed AS (
        UPDATE lifecycle_outbox l
           SET worker_id = NULL, claim_epoch = NULL, heartbeat_at = NULL
          FROM stale s
         WHERE l.shard_id BETWEEN p_lo AND p_hi
           AND l.shard_id = s.shard_id AND l.resource_id = s.resource_id
           AND l.transition = s.transition AND l.generation = s.generation
           AND l.binding_name = s.binding_name
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM freed;
    IF v_n > 0 THEN
        PERFORM pg_notify('lifecycle_ready', '');
    END IF;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- cascade_mark_for_deletion: step 1 of a delete. Walks from p_id across BOTH
-- edge kinds, transitively: everything it owns (owner_id subtree) and
-- everything that depends on it (resource_deps dependency → dependent). The
-- recursive CTE uses UNION, which discards ids already reached, so a
-- dependency cycle terminates. Each newly marked row gets
-- deletion_requested_at = p_now and its kind's finalizer_name (kind_config)
-- seeded into finalizers[]; a row already marked keeps its state (re-seeding
-- would re-run a finished teardown). A finite frozen_until (orphan grace) is
-- cleared: the row is being deleted now; a quarantine ('infinity') stays, it
-- does not hold teardown back. Pending reconcile tasks of the marked rows are
-- dropped (a leased one finishes; its result cannot un-mark). Rows are locked
-- in id order so two overlapping cascades cannot deadlock.
-- Enqueues nothing and removes nothing: that is sweep_deletable's job, in a
-- separate statement, because a data-modifying CTE would see the pre-mark
-- snapshot and take every node for an unblocked leaf.
-- Returns the number of rows newly marked.
-- +goose StatementBegin
CREATE FUNCTION cascade_mark_for_deletion(p_id uuid, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_ids uuid[];
    v_n   int;
BEGIN
    WITH RECURSIVE tree(id) AS (
        SELECT id FROM resources WHERE id = p_id
        UNION
        SELECT n.id
          FROM tree t
         CROSS JOIN LATERAL (
               SELECT c.id FROM resources c WHERE c.owner_id = t.id
               UNION ALL
               SELECT d.dependent_id FROM resource_deps d WHERE d.dependency_id = t.id
         ) n
    )
    SELECT array_agg(id ORDER BY id) INTO v_ids FROM tree;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;

    PERFORM 1 FROM resources WHERE id = ANY (v_ids) ORDER BY id FOR UPDATE;

    UPDATE resources r
       SET deletion_requested_at = p_now,
           finalizers = coalesce(
               (SELECT CASE WHEN kc.finalizer_name = ANY (r.finalizers) THEN r.finalizers
                            ELSE r.finalizers || kc.finalizer_name END
                  FROM kind_config kc
                 WHERE kc.kind = r.kind AND kc.version = r.version AND kc.finalizer_name IS NOT NULL),
               r.finalizers),
           frozen_until = CASE WHEN r.frozen_until = 'infinity' THEN r.frozen_until END,
           updated_at = p_now
     WHERE r.id = ANY (v_ids)
       AND r.deletion_requested_at IS NULL;
    GET DIAGNOSTICS v_n = ROW_COUNT;

    DELETE FROM work_queue q
     USING resources r
     WHERE r.id = ANY (v_ids)
       AND q.shard_id = r.shard_id AND q.resource_id = r.id
       AND q.task_type = 'reconcile' AND q.worker_id IS NULL;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- sweep_deletable: steps 2 and 3 of a delete, the level-triggered engine.
-- For each marked row in [p_lo, p_hi] that is UNBLOCKED — no owned child left
-- and no dependent left (the resource_deps edge disappears with the
-- dependent's row) — either
--   * finalizers present, no delete task queued → enqueue its 'delete' task
--     (trigger 'deleteRequested'): its teardown runs now and only now, after
--     every dependent is gone;
--   * finalizers empty (teardown done, or a kind without one) → hard-delete
--     the row (and any leftover queue rows of it).
-- A hard delete can unblock the layer above, so the sweep loops within the
-- call until a pass deletes nothing: a ready subtree collapses at once. Strict
-- wait: a row whose teardown never finishes keeps its finalizer and blocks its
-- owners and dependencies forever (no dead-letter unblock), surfacing the
-- stuck row instead of orphaning infrastructure. (A dependency cycle among
-- marked rows never unblocks either; composers emit DAGs.)
-- Idle gate: idx_resources_deleting (empty in steady state). Candidates are
-- locked SKIP LOCKED; at most p_max rows are advanced per call.
-- Returns the number of rows advanced (tasks enqueued + rows deleted).
-- +goose StatementBegin
CREATE FUNCTION sweep_deletable(p_lo int, p_hi int, p_max int, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_hard   uuid[];
    v_fin    uuid[];
    v_enq    int;
    v_del    int;
    v_queued int := 0;
    v_total  int := 0;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM resources
                    WHERE deletion_requested_at IS NOT NULL AND shard_id BETWEEN p_lo AND p_hi) THEN
        RETURN 0;
    END IF;
    LOOP
        v_enq := 0;
        v_del := 0;
        SELECT array_agg(c.id) FILTER (WHERE c.finalizers = '{}'),
               array_agg(c.id) FILTER (WHERE c.finalizers <> '{}')
          INTO v_hard, v_fin
          FROM (SELECT r.id, r.finalizers
                  FROM resources r
                 WHERE r.deletion_requested_at IS NOT NULL
                   AND r.shard_id BETWEEN p_lo AND p_hi
                   AND NOT EXISTS (SELECT 1 FROM resources o WHERE o.owner_id = r.id)
                   AND NOT EXISTS (SELECT 1 FROM resource_deps d WHERE d.dependency_id = r.id)
                   AND (r.finalizers = '{}'
                        OR NOT EXISTS (SELECT 1 FROM work_queue q
                                        WHERE q.shard_id BETWEEN p_lo AND p_hi
                                          AND q.shard_id = r.shard_id AND q.resource_id = r.id
                                          AND q.task_type = 'delete'))
                 LIMIT p_max - v_total
                 FOR UPDATE OF r SKIP LOCKED) c;

        IF v_fin IS NOT NULL THEN
            INSERT INTO work_queue (resource_id, task_type, shard_id, kind, version, generation, trigger,
                                    provider_config, provider_bundle, not_before)
            SELECT r.id, 'delete', r.shard_id, r.kind, r.version, r.generation, 'deleteRequested',
                   pc.spec, pc.data, p_now
              FROM resources r
              LEFT JOIN providerconfigs pc ON pc.kind = r.kind AND pc.name = r.provider_config_ref
             WHERE r.id = ANY (v_fin)
            ON CONFLICT (shard_id, resource_id, task_type, op_id) DO NOTHING;
            GET DIAGNOSTICS v_enq = ROW_COUNT;
            v_queued := v_queued + v_enq;
        END IF;

        IF v_hard IS NOT NULL THEN
            DELETE FROM work_queue WHERE shard_id BETWEEN p_lo AND p_hi AND resource_id = ANY (v_hard);
            DELETE FROM resources WHERE id = ANY (v_hard);
            GET DIAGNOSTICS v_del = ROW_COUNT;
        END IF;

        v_total := v_total + v_enq + v_del;
        EXIT WHEN v_del = 0 OR v_total >= p_max;
    END LOOP;
    IF v_queued > 0 THEN
        PERFORM notify_gated('work_ready');
    END IF;
    RETURN v_total;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- request_resource_deletion: DELETE of a resource (the API, and the
-- composer's prune of a finalizer-kind child). Marks the teardown tree
-- (cascade_mark_for_deletion), then kicks sweep_deletable once over the whole
-- shard range [0, 255] — the tree spans arbitrary shards — so its unblocked
-- leaves start tearing down now rather than on the next reaper tick (which is
-- the backstop). Idempotent: a repeat marks nothing new but still kicks.
-- Returns the number of rows newly marked (0 also for a missing id).
-- +goose StatementBegin
CREATE FUNCTION request_resource_deletion(p_id uuid, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    v_n := cascade_mark_for_deletion(p_id, p_now);
    PERFORM sweep_deletable(0, 255, 1000, p_now);
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- sweep_expired_orphans: orphan-grace expiry. Composer-dropped rows in
-- [p_lo, p_hi] whose grace deadline passed (frozen_until < p_now — never a
-- quarantined 'infinity' row) and that nobody re-adopted are escalated to the
-- real delete, oldest deadline first, at most p_max:
--   * a kind with a finalizer (kind_config.finalizer_name), or a row that owns
--     children → the soft-delete protocol (cascade_mark_for_deletion, then one
--     sweep_deletable kick), so every Deleter runs in order;
--   * a leaf kind without a finalizer → hard delete.
-- Idle gate: one probe of idx_resources_frozen_sweep below p_now (empty in
-- steady state; quarantined rows sort above any finite instant). Candidates
-- are locked SKIP LOCKED. Returns the number of orphans escalated.
-- +goose StatementBegin
CREATE FUNCTION sweep_expired_orphans(p_lo int, p_hi int, p_max int, p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_soft uuid[];
    v_hard uuid[];
    v_id   uuid;
    v_n    int := 0;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM resources WHERE frozen_until < p_now) THEN
        RETURN 0;
    END IF;
    SELECT array_agg(c.id) FILTER (WHERE c.soft), array_agg(c.id) FILTER (WHERE NOT c.soft)
      INTO v_soft, v_hard
      FROM (SELECT r.id,
                   (EXISTS (SELECT 1 FROM kind_config kc
                             WHERE kc.kind = r.kind AND kc.version = r.version AND kc.finalizer_name IS NOT NULL)
                    OR EXISTS (SELECT 1 FROM resources o WHERE o.owner_id = r.id)) AS soft
              FROM resources r
             WHERE r.frozen_until < p_now
               AND r.shard_id BETWEEN p_lo AND p_hi
               AND r.deletion_requested_at IS NULL
             ORDER BY r.frozen_until
             LIMIT p_max
             FOR UPDATE OF r SKIP LOCKED) c;

    IF v_hard IS NOT NULL THEN
        DELETE FROM work_queue WHERE shard_id BETWEEN p_lo AND p_hi AND resource_id = ANY (v_hard);
        DELETE FROM resources WHERE id = ANY (v_hard);
        v_n := v_n + cardinality(v_hard);
    END IF;
    IF v_soft IS NOT NULL THEN
        FOREACH v_id IN ARRAY v_soft LOOP
            PERFORM cascade_mark_for_deletion(v_id, p_now);
        END LOOP;
        PERFORM sweep_deletable(0, 255, greatest(p_max, 1000), p_now);
        v_n := v_n + cardinality(v_soft);
    END IF;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- quarantine_resource: the operator set-aside. frozen_until = 'infinity'
-- (phase Quarantined) freezes the row from every scheduler and substitute
-- pass (they all gate on frozen_until IS NULL), and the reaper never sweeps
-- it ('infinity' is never < now). Drops a pending RECONCILE task — never a
-- delete task: quarantine must not interfere with teardown. Its root is
-- re-offered to schedule_eligible, since the frozen child no longer holds the
-- root's rollup back. Returns false when the row does not exist.
-- +goose StatementBegin
CREATE FUNCTION quarantine_resource(p_id uuid)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_shard int;
    v_root  uuid;
BEGIN
    UPDATE resources SET frozen_until = 'infinity' WHERE id = p_id
    RETURNING shard_id, root_id INTO v_shard, v_root;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    DELETE FROM work_queue
     WHERE shard_id BETWEEN v_shard AND v_shard
       AND resource_id = p_id AND task_type = 'reconcile' AND worker_id IS NULL;
    IF v_root IS NOT NULL THEN
        PERFORM schedule_eligible(ARRAY[v_root]);
    END IF;
    RETURN true;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- unquarantine_resource: lifts a quarantine (only 'infinity'; an orphan's
-- finite deadline is the composer's business) and re-arms the row through
-- schedule_eligible, so a spec edited while quarantined reconciles now.
-- Returns false when the row does not exist.
-- +goose StatementBegin
CREATE FUNCTION unquarantine_resource(p_id uuid)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE resources SET frozen_until = NULL WHERE id = p_id AND frozen_until = 'infinity';
    IF NOT FOUND THEN
        RETURN EXISTS (SELECT 1 FROM resources WHERE id = p_id);
    END IF;
    PERFORM schedule_eligible(ARRAY[p_id]);
    RETURN true;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- recount_inflight: the concurrency cap's self-heal. For every capped kind
-- (kind_config.max_inflight > 0) count its leased work_queue rows in
-- [p_lo, p_hi] (idx_work_queue_leased, pruned to the range's partitions),
-- delete every kind_inflight partial whose range_lo falls in [p_lo, p_hi]
-- (the claimers' finer hints and any earlier recount) and write one
-- authoritative partial keyed range_lo = p_lo. The truth comes from the queue,
-- so completions, reaped leases and lost decrements all heal within one
-- reaper interval. No-op (0) when no kind is capped. Returns the number of
-- partials written.
-- +goose StatementBegin
CREATE FUNCTION recount_inflight(p_lo int, p_hi int)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM kind_config WHERE max_inflight > 0) THEN
        RETURN 0;
    END IF;
    DELETE FROM kind_inflight WHERE range_lo BETWEEN p_lo AND p_hi;
    INSERT INTO kind_inflight AS k (kind, version, range_lo, in_flight)
    SELECT kc.kind, kc.version, p_lo, coalesce(l.n, 0)
      FROM kind_config kc
      LEFT JOIN (SELECT q.kind, q.version, count(*) AS n
                   FROM work_queue q
                  WHERE q.shard_id BETWEEN p_lo AND p_hi
                    AND q.worker_id IS NOT NULL
                  GROUP BY q.kind, q.version) l
        ON l.kind = kc.kind AND l.version = kc.version
     WHERE kc.max_inflight > 0
    ON CONFLICT (kind, version, range_lo) DO UPDATE SET in_flight = EXCLUDED.in_flight;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- assign_member_shards: dynamic sharding, no leader. Ranks p_member_id among
-- the LIVE members of its own role (heartbeat newer than p_liveness_secs,
-- ordered by member_id in "C" collation) and cuts [0, p_total) into count
-- contiguous slices: rank r of n owns [r*total/n, (r+1)*total/n). The slices
-- tile [0, p_total) disjointly; roles tile independently. Returns one
-- int4range (one BETWEEN lo AND hi-1 → one or two partitions).
-- A member that is not live (unknown, or its heartbeat lapsed) gets 'empty',
-- never NULL: "owns nothing" is a value every caller handles the same way
-- (isempty), and it is also what a member gets when there are more live
-- members than shards.
-- +goose StatementBegin
CREATE FUNCTION assign_member_shards(p_member_id text, p_total int DEFAULT 256, p_liveness_secs int DEFAULT 30,
                                     p_now timestamptz DEFAULT now())
RETURNS int4range LANGUAGE sql STABLE AS $$
    WITH me AS (
        SELECT role FROM cluster_members
         WHERE member_id = p_member_id
           AND last_heartbeat > p_now - make_interval(secs => p_liveness_secs)
    ), live AS (
        SELECT m.member_id,
               row_number() OVER (ORDER BY m.member_id COLLATE "C") - 1 AS rank,
               count(*) OVER () AS n
          FROM cluster_members m, me
         WHERE m.role = me.role
           AND m.last_heartbeat > p_now - make_interval(secs => p_liveness_secs)
    )
    SELECT coalesce(
        (SELECT int4range((rank * p_total / n)::int, ((rank + 1) * p_total / n)::int)
           FROM live WHERE member_id = p_member_id),
        'empty'::int4range)
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- gc_stale_cluster_members: UI/history cleanup, not a routing signal (routing
-- drops a member after the much shorter liveness window). Hard-deletes rows
-- whose heartbeat is older than p_ttl: members that crashed or whose
-- deregister timed out. An idle tick is one read (the DELETE runs only when a
-- row qualifies); each removed row fires cluster_changed through the
-- row-level trigger, so the role re-tiles. Returns the number removed.
-- +goose StatementBegin
CREATE FUNCTION gc_stale_cluster_members(p_ttl interval DEFAULT interval '5 minutes', p_now timestamptz DEFAULT now())
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM cluster_members WHERE last_heartbeat < p_now - p_ttl) THEN
        RETURN 0;
    END IF;
    DELETE FROM cluster_members WHERE last_heartbeat < p_now - p_ttl;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS gc_stale_cluster_members(interval, timestamptz),
    assign_member_shards(text, int, int, timestamptz),
    recount_inflight(int, int),
    unquarantine_resource(uuid),
    quarantine_resource(uuid),
    sweep_expired_orphans(int, int, int, timestamptz),
    request_resource_deletion(uuid, timestamptz),
    sweep_deletable(int, int, int, timestamptz),
    cascade_mark_for_deletion(uuid, timestamptz),
    reap_stale_lifecycle(int, int, interval, timestamptz),
    delete_unclaimed_work(int, int, interval, timestamptz),
    reap_stale_work(int, int, interval, timestamptz),
    resync_resource(uuid, timestamptz),
    requeue_for_resync(text, text, int, int, interval, boolean, int, timestamptz),
    resync_enqueue(uuid[], boolean, timestamptz),
    requeue_failed_and_pending(int, int, int, interval, timestamptz);
ALTER TABLE resources DROP COLUMN IF EXISTS last_resync_at;
