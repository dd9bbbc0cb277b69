-- 00019_history_version: the kind version each kept generation was applied
-- at. A resource applied at another version of its kind migrates live, and
-- its earlier generations' specs belong to the version they were applied at:
-- a rollback restores a generation at its version (record_spec_history
-- stamps it; rollbackResource reads it). Generations kept before this
-- migration have none (NULL): a rollback to one keeps the resource's current
-- version, as it did.

-- +goose Up
ALTER TABLE resource_spec_history ADD COLUMN version text;

-- +goose Down
ALTER TABLE resource_spec_history DROP COLUMN IF EXISTS version;
