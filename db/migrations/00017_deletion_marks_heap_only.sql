-- 00017_deletion_marks_heap_only: the marked rows' index moves to
-- resource_phases.
--
-- The reaper's backstop for deletes (sweep_deletable) walks the marked rows
-- by shard. Its index on resources had deletion_requested_at as its
-- predicate, so marking a row for deletion was never a heap-only update:
-- every index of resources got a new entry for every row of a deleted tree
-- (17% of a fleet's teardown, by statement time). A marked row's phase is
-- Deleting (the phase precedence puts the mark first), and its
-- resource_phases entry is rewritten by the mark anyway, so the walk reads
-- the same rows from a partial index there, and the mark on resources is
-- heap-only.
--
-- Built concurrently, outside a transaction (a plain build would block
-- every phase write for as long as it reads the table); the old index goes
-- after the new one exists. A build that failed leaves an invalid index,
-- which the next run drops and builds again.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS idx_resource_phases_deleting;
CREATE INDEX CONCURRENTLY idx_resource_phases_deleting ON resource_phases (shard_id) WHERE phase = 'Deleting';
DROP INDEX CONCURRENTLY IF EXISTS idx_resources_deleting;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS idx_resources_deleting;
CREATE INDEX CONCURRENTLY idx_resources_deleting ON resources (shard_id) WHERE deletion_requested_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS idx_resource_phases_deleting;
