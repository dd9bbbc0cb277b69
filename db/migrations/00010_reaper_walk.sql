-- 00010_reaper_walk: the reaper's lagging walk resumes where it stopped.
--
-- requeue_failed_and_pending walked idx_resource_phases_lagging oldest first,
-- up to its budget per shard, on every tick. In a backlog the oldest lagging
-- rows are the ones already queued (only rows it re-pends move to the back),
-- so each tick re-read the same front of the index and found nothing: at
-- 300k resources a tick read about 330,000 buffers, a busy backend all
-- along, and a lagging row without a task behind that front was never
-- reached. The walk now keeps a position per shard, (since, id) of the last
-- entry it examined, and goes on from there next tick; at the end of a
-- shard's entries it starts again from the oldest. UNLOGGED: a position lost
-- in a crash only restarts that shard's walk from its oldest entry.

-- +goose Up
CREATE UNLOGGED TABLE reaper_walk_cursors (
    shard_id int         PRIMARY KEY,
    since    timestamptz NOT NULL,
    id       uuid        NOT NULL
);

-- The walk's key gains id: a drain batch gives many entries one since, and a
-- position must be exact inside such a run.
DROP INDEX idx_resource_phases_lagging;
CREATE INDEX idx_resource_phases_lagging ON resource_phases (shard_id, since, id)
    WHERE phase IN ('Reconciling', 'Failed');

-- +goose Down
DROP INDEX idx_resource_phases_lagging;
CREATE INDEX idx_resource_phases_lagging ON resource_phases (shard_id, since)
    WHERE phase IN ('Reconciling', 'Failed');
DROP TABLE reaper_walk_cursors;
