-- resources_labels_update (AFTER UPDATE OF labels, per row, only when labels
-- changed) replaces the row's resource_labels entries. Status writes never SET
-- labels, so the drainer's hot path never runs it.
CREATE OR REPLACE FUNCTION resources_labels_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM resource_labels l
     USING jsonb_each_text(OLD.labels) ol
     WHERE l.key = ol.key AND l.value = ol.value AND l.created_at = OLD.created_at AND l.resource_id = OLD.id;
    INSERT INTO resource_labels (resource_id, key, value, created_at)
    SELECT NEW.id, l.key, l.value, NEW.created_at FROM jsonb_each_text(NEW.labels) l;
    RETURN NULL;
END
$$;
