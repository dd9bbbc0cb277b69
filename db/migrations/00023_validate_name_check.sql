-- 00023_validate_name_check: validate the name CHECK 00012 added NOT VALID.
--
-- VALIDATE CONSTRAINT scans resources under a SHARE UPDATE EXCLUSIVE lock,
-- which lets reads and writes go on (new rows were checked all along). On a
-- database that applied 00012 when it still validated at once, the
-- constraint is valid already and this does nothing.

-- +goose Up
ALTER TABLE resources VALIDATE CONSTRAINT resources_name_check;

-- +goose Down
-- Nothing to undo: 00012's down replaces the constraint.
