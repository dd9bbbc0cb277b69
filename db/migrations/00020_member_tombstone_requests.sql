-- 00020_member_tombstone_requests: a removed member's pending drain or kill.
--
-- reap_unlocked_cluster_members removes the row of a member whose liveness
-- lock is gone. A member that is alive but lost its lock session for a
-- moment (a proxy reset, a failover) re-inserts its row once it holds the
-- lock again; a drain or kill an admin recorded on the row (control,
-- control_by, control_at) before the removal would be gone with it, though
-- the admin was told it was recorded and the member may not have read it
-- yet. The probe keeps the request on the member's tombstone, and the
-- member's re-insert takes it back (membership.Upsert).

-- +goose Up
ALTER TABLE cluster_member_tombstones
    ADD COLUMN control    text CHECK (control IN ('drain', 'kill')),
    ADD COLUMN control_by text,
    ADD COLUMN control_at timestamptz;

-- +goose Down
ALTER TABLE cluster_member_tombstones
    DROP COLUMN IF EXISTS control,
    DROP COLUMN IF EXISTS control_by,
    DROP COLUMN IF EXISTS control_at;
