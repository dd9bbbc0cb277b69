-- 00025_crash_rewalk: after a crash restart, every composite's rollup is
-- pended again.
--
-- A crash restart of Postgres (or a failover to a standby) empties the
-- UNLOGGED queue. The catch-up rebuilds what the durable columns say is
-- owed (synced_gen < generation, open operations), but a synced composite
-- whose rollup was queued because a descendant changed owes it in no
-- column: it kept a stale status and phase until something else touched it.
--
-- rollup_rewalk is the crash sentinel: UNLOGGED, so crash recovery empties
-- it with the queue, and its one row, written here and put back by the walk
-- that a missing row starts, says no crash went unanswered. While a walk
-- runs, started_at is set and the row counts the owners it walked and the
-- rollups it pended.
-- rollup_rewalk_cursors holds one position per slice of the owner-id space
-- (256 slices by the id's first byte, numbered like the shards so a
-- reaper walks the slices of its shard range): the last owner the walk
-- pended. A slice's row goes when its walk reaches the end; the walk ends
-- when none is left. Both UNLOGGED: a crash during a walk empties both, and
-- the walk starts over.

-- +goose Up
CREATE UNLOGGED TABLE rollup_rewalk (
    one          boolean     PRIMARY KEY DEFAULT true CHECK (one),
    started_at   timestamptz,
    walked       bigint      NOT NULL DEFAULT 0,
    pended       bigint      NOT NULL DEFAULT 0
);
INSERT INTO rollup_rewalk (one) VALUES (true);

CREATE UNLOGGED TABLE rollup_rewalk_cursors (
    slice int  PRIMARY KEY CHECK (slice BETWEEN 0 AND 255),
    after uuid
);

-- +goose Down
DROP TABLE rollup_rewalk_cursors;
DROP TABLE rollup_rewalk;
