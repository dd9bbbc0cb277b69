-- 00011_rollup_rerun: a composite's rollup that read a subtree which then
-- changed runs again.
--
-- A rollup root is re-pended by the cascade when a descendant settles,
-- recovers or flips health. While the root's own reconcile is leased (its
-- rollup running, or its result waiting in the outbox) that re-pend cannot
-- touch the row, and the running rollup may have read the subtree before the
-- change: its result applied the old picture (a composite left Degraded with
-- every child Ready) and nothing pended it again. The cascade now marks such
-- a leased row (rerun), and the drain that finishes it sends the root through
-- the gate once more. A claim clears the mark: it belongs to one lease.

-- +goose Up
ALTER TABLE work_queue ADD COLUMN rerun boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE work_queue DROP COLUMN rerun;
