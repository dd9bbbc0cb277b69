-- resource_labels_fill_kind (BEFORE INSERT on resource_labels, per row, only
-- for a row written without its kind_label) sets kind_label from the
-- resource's kind. resources_labels_insert and resources_labels_update write
-- it themselves, so it never runs for their rows; it is there for the
-- bodies of the release before the column, which run on a database from
-- the moment migration 00027 adds it until the function set's bodies are
-- replaced (and for as long as that fails). A label row without its
-- kind_label would be missing from every kind + label page, which reads
-- idx_resource_labels_kind only.
CREATE OR REPLACE FUNCTION resource_labels_fill_kind() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    SELECT r.kind || ':' || NEW.key || '=' || NEW.value INTO NEW.kind_label
      FROM resources r WHERE r.id = NEW.resource_id;
    RETURN NEW;
END
$$;
