-- 00013_member_tombstones: the ids of members the dead-member probe removed.
--
-- reap_unlocked_cluster_members removes a member whose liveness lock is gone
-- and frees the leases it held. A claim the dead process had already sent
-- can still be executing in its Postgres backend (a backend notices its
-- client is gone only when it replies), and the free skips the rows that
-- claim holds; the claim then commits leases stamped with a member id that
-- no longer exists, which nobody heartbeats, and which would wait out the
-- stale-lease window (a minute). The probe records each id it removes here
-- and, for a minute after, frees on every tick any lease such an id still
-- holds, so a late claim's leases go within one probe interval. An id whose
-- member registered again (it had only lost its lock) is not freed. Rows
-- older than ten minutes are deleted whenever the probe removes a member:
-- the table holds the members removed in the last few minutes.

-- +goose Up
CREATE TABLE cluster_member_tombstones (
    member_id  text        PRIMARY KEY,
    removed_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE IF EXISTS cluster_member_tombstones;
