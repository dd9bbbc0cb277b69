-- resources_labels_insert (AFTER INSERT, per statement) writes each new
-- resource's labels into resource_labels, the keyed index of the
-- label-filtered list path. Rows without labels are filtered before the
-- per-row jsonb_each_text call, which costs more than the rest of a row's
-- share when most rows (composed children) carry none.
CREATE OR REPLACE FUNCTION resources_labels_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_labels (resource_id, key, value, created_at)
    SELECT n.id, l.key, l.value, n.created_at FROM new_rows n, jsonb_each_text(n.labels) l
     WHERE n.labels <> '{}';
    RETURN NULL;
END
$$;
