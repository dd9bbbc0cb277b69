-- 00016_event_retention: the event log in time order.
--
-- Resource events are kept for EVENT_RETENTION (7 days by default), and
-- every control pod deletes the older ones once a minute, oldest first
-- (maintenance.PruneEvents). This index is the order it deletes in: a pass
-- reads only the rows it deletes, and with nothing expired it is one probe,
-- however long the log. Ids are not that order: an event's created_at is
-- its transaction's start, and a transaction that started earlier can write
-- after one that started later.
--
-- Built concurrently, outside a transaction: a plain build would block every
-- event insert — a drain's rollup events among them — for as long as it
-- reads a large log. A build that failed leaves an invalid index, which the
-- next run drops and builds again.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS idx_resource_events_created;
CREATE INDEX CONCURRENTLY idx_resource_events_created ON resource_events (created_at);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS idx_resource_events_created;
