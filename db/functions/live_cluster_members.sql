-- live_cluster_members: the one liveness rule shard tiling and routing share.
-- A member is live while its heartbeat is newer than p_liveness_secs AND, when
-- it recorded a lock_key, the session advisory lock (classid 20251201, objid
-- lock_key: the two-int4 form) is still granted in this database. A process
-- that crashes loses its backend, and with it the lock, at once; so a crashed
-- member drops out in the time it takes a peer to look, not after the
-- heartbeat window. A member without a lock_key (an older binary) is judged
-- by its heartbeat alone. pg_locks is read once per call.
-- A lock whose session has sat idle for more than 3 s does not count: the
-- member pings its lock session every 250 ms, so such a session belongs to a
-- member cut off behind something that keeps its TCP connection open (a
-- proxy, a NAT box) where the server's keepalives cannot see the loss. (A
-- session whose activity this role may not read counts as live.)
-- A member an admin asked to drain or kill (cluster_members.control) is not
-- live either: it claims nothing more and its shards re-tile to the others
-- while it finishes its in-flight work.
CREATE OR REPLACE FUNCTION live_cluster_members(p_liveness_secs int DEFAULT 30, p_now timestamptz DEFAULT now())
RETURNS TABLE (member_id text, role text) LANGUAGE sql STABLE AS $$
    WITH held AS MATERIALIZED (
        SELECT l.objid::bigint AS lock_key
          FROM pg_locks l
          LEFT JOIN pg_stat_activity a ON a.pid = l.pid
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
           AND l.classid = 20251201::oid
           AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
           AND NOT coalesce(a.state = 'idle' AND a.state_change < clock_timestamp() - interval '3 seconds', false)
    )
    SELECT m.member_id, m.role
      FROM cluster_members m
     WHERE m.last_heartbeat > p_now - make_interval(secs => p_liveness_secs)
       AND (m.lock_key IS NULL OR m.lock_key IN (SELECT h.lock_key FROM held h))
       AND m.control IS NULL
$$;
