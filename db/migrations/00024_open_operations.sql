-- 00024_open_operations: the operations still open (Pending or Running).
--
-- The crash catch-up (requeue_failed_and_pending, through
-- requeue_lost_operations) finds the open operations whose task a crash
-- restart wiped with the UNLOGGED queue. This index is what it reads: with
-- no operation open it is one probe, however long the operations' history.
--
-- Built concurrently, outside a transaction: a plain build would block
-- every operation's enqueue and finish (a drain) for as long as it reads
-- the history. A build that failed leaves an invalid index, which the next
-- run drops and builds again.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS idx_resource_operations_open;
CREATE INDEX CONCURRENTLY idx_resource_operations_open ON resource_operations (created_at)
    WHERE state IN ('Pending', 'Running');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS idx_resource_operations_open;
