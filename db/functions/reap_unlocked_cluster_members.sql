-- reap_unlocked_cluster_members: the fast failure detector. Every member runs
-- it on a short timer; it deletes the rows of members that recorded a
-- lock_key whose session advisory lock (classid 20251201, objid lock_key) is
-- no longer granted in this database: the process crashed or its lock
-- connection died, so its backend is gone. Each removed row fires
-- cluster_changed (the row-level trigger's gated wake, plus one ungated wake
-- here: a removal is rare and its wake must not be coalesced away by a join
-- a moment earlier), so every member re-tiles at once. The leases the dead
-- members held (work_queue and lifecycle_outbox rows stamped with their
-- member id) are freed instead of waiting out the stale-lease window. A
-- freed queue row is claimable after a redelivery grace of one second
-- (not_before): the dead broker's workers reconnect within their
-- 0.1-0.5 s backoff and adopt the tasks they still run or hold a result of
-- (same epoch, no re-run), and every member has re-read its routes on the
-- removal's cluster_changed (a broker that still counted the dead one as a
-- peer serving the kind would claim the task for it, stamp a new epoch and
-- re-run it on whichever worker comes next). Each removed id is recorded in
-- cluster_member_tombstones, and for a minute after, every tick frees again
-- whatever leases it still holds: rows another transaction held were
-- skipped (SKIP LOCKED), and a claim the dead process sent before it died
-- can still be executing in its backend and commit after the removal,
-- stamping leases with the removed id (the backend notices its client is
-- gone only when it replies). An id whose member registered again is left
-- alone. While no tombstone is younger than a minute nothing more runs. A
-- freed work_queue row keeps its claim_epoch until it is claimed again:
-- the dead broker's worker still holds that
-- claim's unacked result and redelivers it to whichever broker it reaches
-- next, and the result is the claim's own — applying it (at most once: the
-- drain deletes the row) spares a re-run, while a re-claim stamps a new
-- epoch that fences it out.
-- A member that is alive but lost its lock has already stopped claiming (it
-- watches its own lock connection with a deadline shorter than the server's
-- keepalive); it re-inserts its row when it holds the lock again, and takes
-- back the drain or kill an admin had recorded on the removed row, which the
-- removal keeps on the id's tombstone (control, control_by, control_at): a
-- request the member had not read yet would otherwise be lost, though the
-- admin was told it was recorded. The DELETE
-- takes the lock itself (a transaction-level try-lock on the same key)
-- before it removes a row: the owner takes its lock before it writes its
-- row, so a member that re-acquired its lock a moment ago keeps its row, and
-- one that re-acquires while this runs waits for the commit and re-inserts
-- after it. The idle tick is one read of pg_locks, one index probe of
-- cluster_members and one of cluster_member_tombstones; a tick within the
-- minute after a removal adds free_dead_member_leases, which reads only the
-- leased rows.
-- A lock whose session has sat idle for more than 3 s (the owner pings it
-- every 250 ms) belongs to a member cut off behind something that keeps its
-- connection open (a proxy, a NAT box): that session is terminated, so its
-- lock goes and the row is removed on the next tick.
-- A removed member's sessions still in a transaction are terminated: each
-- session of a member carries its id as its application_name
-- (pgpool.NameSessions). A member cut off that way keeps its open
-- transactions, and their row locks, until the cut heals (the server sees
-- nothing wrong with a connection a proxy holds open; its
-- idle_in_transaction_session_timeout is a minute), so the peers that take
-- its shards over would wait behind them: a drain behind the cut-off
-- control's drain transaction, for as long as the cut lasts. The removal
-- holds the member's key (the try-lock above) until it commits, so the
-- member cannot have re-taken its lock and resumed: every such transaction
-- is from before the loss. A session this role may not signal is left to
-- that timeout.
-- The caller judges only while the database shows its own lock held, its
-- session not idle past the rule above (p_self_key, the caller's lock_key;
-- NULL for a caller that holds none): otherwise it removes and ends
-- nothing. A probe checks its own lock before it calls (the member's
-- Settled), but the lock can end after that check and before this reads
-- pg_locks: a restart or failover the member has not noticed yet (its next
-- lock check is up to 250 ms away, a hung one takes a second), an
-- operator's reset of the lock sessions, a pause of the database's host that
-- leaves every session idle past 3 s. Every lock is gone then, the caller's
-- too, and its peers are reconnecting as it is: removing them would free the
-- leases of every task they run and re-tile the cluster twice.
-- Returns the ids removed.
CREATE OR REPLACE FUNCTION reap_unlocked_cluster_members(p_self_key int)
RETURNS SETOF text LANGUAGE plpgsql AS $$
DECLARE
    v_held bigint[];
    v_dead text[];
    v_ctl  text[];
    v_by   text[];
    v_at   timestamptz[];
    v_gone text[];
BEGIN
    SELECT coalesce(array_agg(l.objid::bigint), '{}') INTO v_held
      FROM pg_locks l
      LEFT JOIN pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
       AND l.classid = 20251201::oid
       AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
       AND NOT coalesce(a.state = 'idle' AND a.state_change < clock_timestamp() - interval '3 seconds', false);
    IF p_self_key IS NOT NULL AND p_self_key::bigint <> ALL (v_held) THEN
        RETURN;
    END IF;
    PERFORM pg_terminate_backend(l.pid)
       FROM pg_locks l
       JOIN pg_stat_activity a ON a.pid = l.pid
      WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
        AND l.classid = 20251201::oid
        AND l.database = (SELECT d.oid FROM pg_database d WHERE d.datname = current_database())
        AND a.state = 'idle' AND a.state_change < clock_timestamp() - interval '3 seconds';
    IF EXISTS (SELECT 1 FROM cluster_members m
                WHERE m.lock_key IS NOT NULL AND m.lock_key <> ALL (v_held)) THEN
        WITH gone AS (
            DELETE FROM cluster_members m
             WHERE m.lock_key IS NOT NULL AND m.lock_key <> ALL (v_held)
               AND pg_try_advisory_xact_lock(20251201, m.lock_key::int)
            RETURNING m.member_id, m.control, m.control_by, m.control_at
        )
        SELECT array_agg(member_id), array_agg(control), array_agg(control_by), array_agg(control_at)
          INTO v_dead, v_ctl, v_by, v_at
          FROM gone;
    END IF;
    IF v_dead IS NOT NULL THEN
        BEGIN
            PERFORM pg_terminate_backend(a.pid)
               FROM pg_stat_activity a
              WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
                AND a.xact_start IS NOT NULL
                AND a.application_name = ANY (SELECT left(d.id, 63) FROM unnest(v_dead) d(id));
        EXCEPTION WHEN insufficient_privilege THEN
            NULL;
        END;
        BEGIN
            INSERT INTO cluster_member_tombstones AS t (member_id, control, control_by, control_at)
            SELECT * FROM unnest(v_dead, v_ctl, v_by, v_at)
            ON CONFLICT (member_id) DO UPDATE
               SET removed_at = now(),
                   control    = coalesce(EXCLUDED.control, t.control),
                   control_by = CASE WHEN EXCLUDED.control IS NULL THEN t.control_by ELSE EXCLUDED.control_by END,
                   control_at = CASE WHEN EXCLUDED.control IS NULL THEN t.control_at ELSE EXCLUDED.control_at END;
        EXCEPTION WHEN undefined_column THEN
            -- The schema before migration 00020 (this function set is applied
            -- before the migrations): the tombstone keeps no request.
            INSERT INTO cluster_member_tombstones (member_id)
            SELECT unnest(v_dead)
            ON CONFLICT (member_id) DO UPDATE SET removed_at = now();
        END;
        DELETE FROM cluster_member_tombstones WHERE removed_at < now() - interval '10 minutes';
        PERFORM pg_notify('cluster_changed', '');
    END IF;
    SELECT array_agg(t.member_id) INTO v_gone
      FROM cluster_member_tombstones t
     WHERE t.removed_at > now() - interval '1 minute'
       AND NOT EXISTS (SELECT 1 FROM cluster_members m WHERE m.member_id = t.member_id);
    IF v_gone IS NULL THEN
        RETURN QUERY SELECT unnest(v_dead);
        RETURN;
    END IF;
    PERFORM free_dead_member_leases(v_gone);
    RETURN QUERY SELECT unnest(v_dead);
END
$$;
