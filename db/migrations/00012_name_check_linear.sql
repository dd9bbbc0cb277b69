-- 00012_name_check_linear: the object-name CHECKs without a bounded
-- repetition.
--
-- A CHECK constraint is evaluated on every INSERT and on every UPDATE of
-- the row, whatever columns the UPDATE sets — so the name rule ran on each
-- drained status write, value-flow substitution and compose bookkeeping of
-- resources, several times per reconcile. Postgres's regex engine expands
-- a bounded repetition ({0,251}) into that many automaton states: the
-- pattern cost about 20 µs per row, 13% of the database's CPU in a
-- 100k-leaf run. The same rule as an unbounded class and a length test,
-- ^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$ and length <= 253 (every character it
-- admits is one byte), costs about 0.4 µs. The constraints keep their
-- names, so a violation still reads as before.
--
-- The new constraint on resources is added NOT VALID: checking every row
-- here would scan the table under the ACCESS EXCLUSIVE lock the ALTER
-- takes (2.3 s at a million rows, every read and write waiting). It
-- admits the same names as the old one, and 00023 validates it under a
-- lock that lets reads and writes go on.

-- +goose Up
ALTER TABLE resources DROP CONSTRAINT resources_name_check,
    ADD CONSTRAINT resources_name_check CHECK (length(name) <= 253 AND name ~ '^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$') NOT VALID;
ALTER TABLE providerconfigs DROP CONSTRAINT providerconfigs_name_check,
    ADD CONSTRAINT providerconfigs_name_check CHECK (length(name) <= 253 AND name ~ '^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$');
ALTER TABLE reactor_bindings DROP CONSTRAINT reactor_bindings_name_check,
    ADD CONSTRAINT reactor_bindings_name_check CHECK (length(name) <= 253 AND name ~ '^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$');

-- +goose Down
ALTER TABLE resources DROP CONSTRAINT resources_name_check,
    ADD CONSTRAINT resources_name_check CHECK (name ~ '^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$');
ALTER TABLE providerconfigs DROP CONSTRAINT providerconfigs_name_check,
    ADD CONSTRAINT providerconfigs_name_check CHECK (name ~ '^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$');
ALTER TABLE reactor_bindings DROP CONSTRAINT reactor_bindings_name_check,
    ADD CONSTRAINT reactor_bindings_name_check CHECK (name ~ '^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$');
