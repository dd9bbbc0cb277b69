-- kind_config_changed (AFTER UPDATE ON kind_config, per statement) announces
-- a live policy edit (updateKindConfig) on kind_config_changed so the API's
-- subscription hub (core/live) re-lists the kinds and pushes them to the
-- kinds subscribers. A manifest apply announces on kind_manifest_changed
-- already (kind_manifest_after_apply); this covers the policy edits that do
-- not touch the manifest. Direct (not gated): operators edit policy rarely.
CREATE OR REPLACE FUNCTION kind_config_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kind_config_changed', '');
    RETURN NULL;
END
$$;
