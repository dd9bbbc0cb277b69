-- 00008_member_control: operator control of a running member.
--
-- cluster_members.control is a request an admin recorded on a member's row
-- (the drainClusterMember / killClusterMember mutations, `conctl cluster
-- drain|kill`, the dashboard's Cluster page): 'drain' asks the member to
-- leave gracefully (it stops claiming at once, finishes or hands back its
-- in-flight work within its drain budget, deregisters and exits), 'kill'
-- asks it to exit at once, as a crash would. Members have no other control
-- channel: the request travels through Postgres (an ungated cluster_changed
-- wake, and each member reads its own row every second). A member with a
-- request is no longer live for shard tiling and routing
-- (live_cluster_members), so its shards re-tile to the others the moment the
-- request commits. control_by is the actor, control_at the database clock.
-- A row that still carries a request is a member on its way out; the row
-- goes when the member deregisters (drain) or when a peer sees its liveness
-- lock gone (kill).

-- +goose Up
ALTER TABLE cluster_members
    ADD COLUMN control    text CHECK (control IN ('drain', 'kill')),
    ADD COLUMN control_by text,
    ADD COLUMN control_at timestamptz;

-- +goose Down
ALTER TABLE cluster_members
    DROP COLUMN IF EXISTS control,
    DROP COLUMN IF EXISTS control_by,
    DROP COLUMN IF EXISTS control_at;
