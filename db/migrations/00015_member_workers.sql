-- 00015_member_workers: how many workers each broker serves.
--
-- A broker reports the worker sessions it serves on every beat (and beats
-- at once when the number changes, which wakes cluster_changed): its peers
-- read it to spread the workers over the brokers. Workers dial whichever
-- broker their load balancer picks and stay there, so after a broker
-- crashes or rolls they bunch on the survivors, and the brokers left with
-- few workers relay most of their shards' stages to them. A broker holding
-- more than its share ends a session or two (a planned end) so those
-- workers reconnect, through the balancer, to the others.

-- +goose Up
ALTER TABLE cluster_members
    ADD COLUMN workers integer NOT NULL DEFAULT 0 CONSTRAINT cluster_members_workers_check CHECK (workers >= 0);

-- +goose Down
ALTER TABLE cluster_members DROP COLUMN IF EXISTS workers;
