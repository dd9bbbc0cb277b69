-- 00003_faults: fast failure detection and reactors that see the final state.
--
-- cluster_members.lock_key: each member holds a session-level advisory lock
-- (classid 20251201, objid lock_key) on a dedicated connection and records
-- its key here, so peers can tell a crashed process (its backend gone, the
-- lock released) from a live one in well under a second instead of waiting
-- for its heartbeat to lapse (live_cluster_members,
-- reap_unlocked_cluster_members). NULL for a member that holds no such lock
-- (an older binary during a rolling upgrade): its liveness is the heartbeat
-- window alone.
--
-- ready_change.resynced: a row that stays synced for its generation but whose
-- phase, health or status changed (a composite re-rolled up after a child
-- recovered); cascade_on_ready_change re-fires its `synced` lifecycle edge
-- with the latest snapshot.

-- +goose Up
ALTER TABLE cluster_members ADD COLUMN lock_key int CHECK (lock_key > 0);
CREATE UNIQUE INDEX idx_cluster_members_lock_key ON cluster_members (lock_key) WHERE lock_key IS NOT NULL;
ALTER TYPE ready_change ADD ATTRIBUTE resynced boolean;

-- +goose Down
ALTER TYPE ready_change DROP ATTRIBUTE IF EXISTS resynced;
DROP INDEX IF EXISTS idx_cluster_members_lock_key;
ALTER TABLE cluster_members DROP COLUMN IF EXISTS lock_key;
