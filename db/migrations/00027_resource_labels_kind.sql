-- 00027_resource_labels_kind: each label row carries its label within its
-- resource's kind, kind_label = "kind:key=value", so that a label filter
-- with a kind reads the label's entries of that kind alone
-- (idx_resource_labels_kind, 00029) instead of the smaller of the label's
-- entries and the kind's rows.
--
-- Adding a nullable column rewrites nothing: the ALTER holds its ACCESS
-- EXCLUSIVE lock on resource_labels for a catalog change only (every
-- statement on the table queues behind it, bounded by the runner's
-- lock_timeout). Until the function set's new bodies are in, the previous
-- release's trigger bodies write label rows without a kind_label; the
-- BEFORE INSERT trigger sets it from the resource for exactly those rows
-- (its WHEN clause keeps the function from running for any other). 00028
-- fills the rows written before this migration.

-- +goose Up
ALTER TABLE resource_labels ADD COLUMN kind_label text;
CREATE TRIGGER resource_labels_fill_kind BEFORE INSERT ON resource_labels
    FOR EACH ROW WHEN (NEW.kind_label IS NULL) EXECUTE FUNCTION resource_labels_fill_kind();

-- +goose Down
DROP TRIGGER IF EXISTS resource_labels_fill_kind ON resource_labels;
ALTER TABLE resource_labels DROP COLUMN IF EXISTS kind_label;
