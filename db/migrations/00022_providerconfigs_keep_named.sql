-- 00022_providerconfigs_keep_named: a composer-owned providerconfig that
-- resources name is not deleted under them.
--
-- The compose's prune and the cascade of its owner's delete removed a
-- composer-owned config even while resources named it (provider_config_ref):
-- they then ran, and were torn down, with their kind's default config,
-- silently. The trigger keeps such a config — still the root's while the
-- root lives (pruned_at: since its composer stopped emitting it), handed
-- over as hand-authored once the root is deleted — and records a Warning;
-- the body is db/functions/providerconfigs_keep_named.sql. Adding a nullable
-- column rewrites nothing; the trigger fires only for deletes of owned
-- configs.

-- +goose Up
ALTER TABLE providerconfigs ADD COLUMN pruned_at timestamptz;
CREATE TRIGGER providerconfigs_keep_named BEFORE DELETE ON providerconfigs
    FOR EACH ROW WHEN (OLD.owner_id IS NOT NULL) EXECUTE FUNCTION providerconfigs_keep_named();

-- +goose Down
DROP TRIGGER IF EXISTS providerconfigs_keep_named ON providerconfigs;
ALTER TABLE providerconfigs DROP COLUMN IF EXISTS pruned_at;
