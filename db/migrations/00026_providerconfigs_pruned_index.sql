-- 00026_providerconfigs_pruned_index: the composer-owned providerconfigs
-- kept after their composition stopped emitting them (pruned_at set, while
-- resources named them).
--
-- The reaper deletes such a config once no resource names it any more
-- (sweep_pruned_configs), on every control pod's orphan tick: this index
-- makes that pass one probe of an index that is empty in steady state,
-- however many configs compositions emit. Partial, so the configs never
-- pruned (all but a few) carry no entry, and a compose's insert or update
-- that leaves pruned_at NULL writes none.
--
-- Built concurrently, outside a transaction (a plain build would block
-- every providerconfig write, a compose's among them, while it reads the
-- table). A build that failed leaves an invalid index, which the next run
-- drops and builds again.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS idx_providerconfigs_pruned;
CREATE INDEX CONCURRENTLY idx_providerconfigs_pruned ON providerconfigs (pruned_at, id)
    WHERE pruned_at IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS idx_providerconfigs_pruned;
