-- 00029_resource_labels_kind_index: the label entries of one kind, in list
-- order. A label filter with a kind walks it from the cursor, and every
-- entry it reads is a match of both: a page costs a page however rare the
-- label is in the kind (it read the smaller of the label's entries and the
-- kind's rows: 164,677 buffers for an empty kind + label page of a 100k
-- fleet, 3 now).
--
-- Its key is kind_label, the label within its kind as one value, rather
-- than (kind, key, value): a walk that compares kind_label can be served by
-- this index alone, where with the three columns the primary key — (key,
-- value) fixed, the kind a filter, the label's entries of every kind read —
-- looked as good whenever the statistics made the two alike (a table
-- analyzed while empty).
--
-- Built concurrently, outside a transaction: a plain build would block
-- every labelled resource's insert and delete for as long as it reads the
-- table. A build that failed leaves an invalid index, which the next run
-- drops and builds again.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS idx_resource_labels_kind;
CREATE INDEX CONCURRENTLY idx_resource_labels_kind ON resource_labels (kind_label, created_at, resource_id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS idx_resource_labels_kind;
