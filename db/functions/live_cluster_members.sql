-- live_cluster_members: the one liveness rule shard tiling and routing share.
-- A member is live while its heartbeat is newer than p_liveness_secs AND, when
-- it recorded a lock_key, the session advisory lock (classid 20251201, objid
-- lock_key: the two-int4 form) is still granted in this database. A process
-- that crashes loses its backend, and with it the lock, at once; so a crashed
-- member drops out in the time it takes a peer to look, not after the
-- heartbeat window. A member without a lock_key (an older binary) is judged
-- by its heartbeat alone. pg_locks is read once per call.
CREATE OR REPLACE FUNCTION live_cluster_members(p_liveness_secs int DEFAULT 30, p_now timestamptz DEFAULT now())
RETURNS TABLE (member_id text, role text) LANGUAGE sql STABLE AS $$
    WITH held AS MATERIALIZED (
        SELECT l.objid::bigint AS lock_key
          FROM pg_locks l
         WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
           AND l.classid = 20251201::oid
           AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
    )
    SELECT m.member_id, m.role
      FROM cluster_members m
     WHERE m.last_heartbeat > p_now - make_interval(secs => p_liveness_secs)
       AND (m.lock_key IS NULL OR m.lock_key IN (SELECT h.lock_key FROM held h))
$$;
