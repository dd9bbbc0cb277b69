-- resources_labels_delete (AFTER DELETE, per statement) removes the deleted
-- resources' resource_labels rows; rows without labels are filtered before
-- their jsonb_each_text call.
CREATE OR REPLACE FUNCTION resources_labels_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM resource_labels l
     USING old_rows o CROSS JOIN LATERAL jsonb_each_text(o.labels) ol
     WHERE o.labels <> '{}'
       AND l.key = ol.key AND l.value = ol.value AND l.created_at = o.created_at AND l.resource_id = o.id;
    RETURN NULL;
END
$$;
