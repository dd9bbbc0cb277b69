-- 00014_rollups_first: a rollup is claimed ahead of its kind's other
-- pending work.
--
-- The claim takes a pair's pending rows oldest first. A composite kind's
-- composes are all pended when its roots are applied, and each root's
-- rollup (a reconcile pended with trigger childrenSettled when its last
-- descendant settles) came after every one of them: in a 1M run a root
-- whose leaves finished while the kind's composes still ran waited up to
-- 2.5 minutes for its rollup, with every leaf READY. A rollup finishes a
-- whole tree and takes a slot of its own, so the claim now takes the pair's
-- due rollups first, through this index, and its other rows after them.

-- +goose Up
CREATE INDEX idx_work_queue_settled ON work_queue (kind, version, task_type, not_before)
    WHERE worker_id IS NULL AND trigger = 'childrenSettled';

-- +goose Down
DROP INDEX idx_work_queue_settled;
