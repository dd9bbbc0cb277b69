-- 00021_config_ref_index: the resources that name a providerconfig.
--
-- A providerconfig a resource names (provider_config_ref) must not be
-- deleted under it: the resource would run — and be torn down — with its
-- kind's default config instead, silently. DeleteProviderConfig refuses
-- while any resource names the config, and this index answers that in one
-- probe at any table size. Partial, so the rows that name no config (most
-- of them) carry no entry; no status or spec write changes either column,
-- so the drain's status update stays heap-only.
--
-- Built concurrently, outside a transaction (a plain build would block
-- every resource write for as long as it reads the table). A build that
-- failed leaves an invalid index, which the next run drops and builds
-- again.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS idx_resources_config_ref;
CREATE INDEX CONCURRENTLY idx_resources_config_ref ON resources (kind, provider_config_ref)
    WHERE provider_config_ref IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS idx_resources_config_ref;
