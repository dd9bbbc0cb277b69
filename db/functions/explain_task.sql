-- explain_task: the claim state of a resource's queued task of one type
-- (explain_resource's queue half). No rows when no such task is queued.
--   * leased (worker_id set): claimed by that broker since leased_at — and
--     when that broker is no longer live (live_cluster_members: crashed,
--     stopped, or told to drain or die), said so: its result may never come,
--     and the reaper frees the lease (the member reaper on its removal, or
--     the stale-lease pass) and the task is queued again;
--   * not_before in the future: backing off after a failed attempt — and,
--     when no live broker serves the kind version, no_worker after it (what
--     holds it once the backoff ends);
--   * otherwise pending, and what the claim waits on: the kind's cap full
--     (kind_cap_usage: in flight >= cap, what claim_budget spends), no live
--     broker reporting a ready worker for the kind version
--     (explain_kind_served), then the queued row itself (since its
--     created_at).
CREATE OR REPLACE FUNCTION explain_task(p_id uuid, p_shard int, p_kind text, p_version text, p_task text,
                                        p_now timestamptz DEFAULT now(), p_liveness_secs int DEFAULT 30)
RETURNS TABLE (gate text, message text, since timestamptz, until_at timestamptz, blocker_ids uuid[],
               blocker_count bigint, in_flight bigint, cap int, broker_id text)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    w  record;
    u  record;
BEGIN
    SELECT q.worker_id, q.leased_at, q.heartbeat_at, q.not_before, q.attempts, q.created_at, q.trigger
      INTO w
      FROM work_queue q
     WHERE q.shard_id BETWEEN p_shard AND p_shard AND q.resource_id = p_id AND q.task_type = p_task
     ORDER BY q.op_id
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF w.worker_id IS NOT NULL THEN
        RETURN QUERY SELECT 'claimed',
            CASE WHEN EXISTS (SELECT 1 FROM live_cluster_members(p_liveness_secs, p_now) l
                               WHERE l.member_id = w.worker_id)
                 THEN format('its %s task (%s) is claimed by broker %s, last heartbeat %s', p_task, w.trigger,
                             w.worker_id, to_char(w.heartbeat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
                 ELSE format('its %s task (%s) is claimed by broker %s, which is no longer live (task heartbeat %s): '
                             'unless its result still lands, the reaper frees its lease and queues it again',
                             p_task, w.trigger, w.worker_id,
                             to_char(w.heartbeat_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'))
            END,
            w.leased_at, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, w.worker_id;
        RETURN;
    END IF;
    IF w.not_before > p_now THEN
        RETURN QUERY SELECT 'backoff',
            CASE WHEN w.attempts > 0 THEN format('its %s task backs off after %s failed attempt(s)', p_task, w.attempts)
                 ELSE format('its %s task is not due yet', p_task) END,
            w.created_at, w.not_before, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
        IF NOT explain_kind_served(p_kind, p_version, p_now, p_liveness_secs) THEN
            RETURN QUERY SELECT 'no_worker',
                format('no live broker has a ready worker for kind %s/%s', p_kind, p_version),
                NULL::timestamptz, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
        END IF;
        RETURN;
    END IF;
    SELECT c.cap, c.in_flight INTO u FROM kind_cap_usage(p_kind, p_version) c;
    IF u.cap > 0 AND u.in_flight >= u.cap THEN
        RETURN QUERY SELECT 'kind_cap',
            format('kind %s/%s is at its concurrency cap: %s in flight of %s', p_kind, p_version, u.in_flight, u.cap),
            NULL::timestamptz, NULL::timestamptz, NULL::uuid[], NULL::bigint, u.in_flight, u.cap, NULL::text;
    END IF;
    IF NOT explain_kind_served(p_kind, p_version, p_now, p_liveness_secs) THEN
        RETURN QUERY SELECT 'no_worker',
            format('no live broker has a ready worker for kind %s/%s', p_kind, p_version),
            NULL::timestamptz, NULL::timestamptz, NULL::uuid[], NULL::bigint, NULL::bigint, NULL::int, NULL::text;
    END IF;
    RETURN QUERY SELECT 'queued', format('its %s task (%s) is queued, waiting for a claim', p_task, w.trigger),
        w.created_at, NULL::timestamptz, NULL::uuid[], NULL::bigint, u.in_flight, u.cap, NULL::text;
END
$$;
