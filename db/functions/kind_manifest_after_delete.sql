-- kind_manifest_after_delete (AFTER DELETE ON kind_manifest) announces the
-- deleted manifest on kind_manifest_changed so manifest caches drop it.
CREATE OR REPLACE FUNCTION kind_manifest_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kind_manifest_changed', OLD.kind || '/' || OLD.version);
    RETURN NULL;
END
$$;
