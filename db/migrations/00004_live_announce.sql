-- 00004_live_announce: announcements for the subscriptions of kinds and
-- reactor bindings (core/live). Provider configs announce already
-- (providerconfigs_changed) and manifests too (kind_manifest_after_apply);
-- these add the reactor bindings and the live policy edits of kind_config.
-- One NOTIFY per statement; the bodies are db/functions/<name>.sql.

-- +goose Up
CREATE TRIGGER reactor_bindings_changed AFTER INSERT OR UPDATE OR DELETE ON reactor_bindings
    FOR EACH STATEMENT EXECUTE FUNCTION reactor_bindings_changed();
CREATE TRIGGER kind_config_changed AFTER UPDATE ON kind_config
    FOR EACH STATEMENT EXECUTE FUNCTION kind_config_changed();

-- +goose Down
DROP TRIGGER IF EXISTS kind_config_changed ON kind_config;
DROP TRIGGER IF EXISTS reactor_bindings_changed ON reactor_bindings;
