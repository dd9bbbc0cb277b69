-- resources_labels_delete (AFTER DELETE, per statement) removes the deleted
-- resources' resource_labels rows; rows without labels are filtered before
-- their jsonb_each_text call. Hash and merge joins are off, as in the other
-- transition-table triggers, so each label row is one probe of the primary
-- key on all four of its columns: the transition table carries no
-- statistics, and the join was planned as a merge join over the whole
-- primary key, which at a million resources read 1.8 million index entries
-- for every deleting statement of a fleet's teardown.
CREATE OR REPLACE FUNCTION resources_labels_delete() RETURNS trigger
LANGUAGE plpgsql SET jit = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
BEGIN
    DELETE FROM resource_labels l
     USING old_rows o CROSS JOIN LATERAL jsonb_each_text(o.labels) ol
     WHERE o.labels <> '{}'
       AND l.key = ol.key AND l.value = ol.value AND l.created_at = o.created_at AND l.resource_id = o.id;
    RETURN NULL;
END
$$;
