-- 00004_member_liveness_lock: each member holds a session-level advisory
-- lock on a dedicated connection and records its key here, so peers can tell
-- a crashed process (its backend gone, the lock released) from a live one in
-- well under a second instead of waiting for its heartbeat to lapse. NULL for
-- a member that holds no such lock (an older binary during a rolling
-- upgrade): its liveness is the heartbeat window alone.

-- +goose Up
ALTER TABLE cluster_members ADD COLUMN lock_key int CHECK (lock_key > 0);
CREATE UNIQUE INDEX idx_cluster_members_lock_key ON cluster_members (lock_key) WHERE lock_key IS NOT NULL;

-- +goose Down
DROP INDEX IF EXISTS idx_cluster_members_lock_key;
ALTER TABLE cluster_members DROP COLUMN IF EXISTS lock_key;
