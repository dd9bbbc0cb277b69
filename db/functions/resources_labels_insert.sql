-- resources_labels_insert (AFTER INSERT, per statement) writes each new
-- resource's labels into resource_labels, the keyed index of the
-- label-filtered list path, each with its kind_label, "kind:key=value" (a
-- kind + label page reads idx_resource_labels_kind). Rows without labels
-- are filtered before the per-row jsonb_each_text call, which costs more
-- than the rest of a row's share when most rows (composed children) carry
-- none.
CREATE OR REPLACE FUNCTION resources_labels_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_labels (resource_id, key, value, created_at, kind_label)
    SELECT n.id, l.key, l.value, n.created_at, n.kind || ':' || l.key || '=' || l.value FROM new_rows n, jsonb_each_text(n.labels) l
     WHERE n.labels <> '{}';
    RETURN NULL;
END
$$;
