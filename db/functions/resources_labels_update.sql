-- resources_labels_update (AFTER UPDATE OF labels, per row, only when labels
-- changed) replaces the row's resource_labels entries. Status writes never SET
-- labels, so the drainer's hot path never runs it. Each old entry goes by its
-- full primary key, one label at a time (a row has a handful): a set-based
-- DELETE … USING jsonb_each_text(…) was planned as a hash join over a Seq
-- Scan of resource_labels while the table had no statistics.
CREATE OR REPLACE FUNCTION resources_labels_update() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_key   text;
    v_value text;
BEGIN
    FOR v_key, v_value IN SELECT ol.key, ol.value FROM jsonb_each_text(OLD.labels) ol LOOP
        DELETE FROM resource_labels l
         WHERE l.key = v_key AND l.value = v_value AND l.created_at = OLD.created_at AND l.resource_id = OLD.id;
    END LOOP;
    INSERT INTO resource_labels (resource_id, key, value, created_at)
    SELECT NEW.id, l.key, l.value, NEW.created_at FROM jsonb_each_text(NEW.labels) l;
    RETURN NULL;
END
$$;
