-- resources_labels_delete (AFTER DELETE, per statement) removes the deleted
-- resources' resource_labels rows; rows without labels are filtered before
-- their jsonb_each_text call. Each label row is found by one probe of the
-- primary key on all four of its columns (LATERAL … OFFSET 0) and deleted
-- by TID: the transition table carries no statistics, and the join written
-- plainly was planned as a merge join over the whole primary key, which at
-- a million resources read 1.8 million index entries for every deleting
-- statement of a fleet's teardown.
CREATE OR REPLACE FUNCTION resources_labels_delete() RETURNS trigger
LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    DELETE FROM resource_labels l
     WHERE l.ctid = ANY (ARRAY(
           SELECT x.ctid
             FROM old_rows o
            CROSS JOIN LATERAL jsonb_each_text(o.labels) ol
            CROSS JOIN LATERAL (SELECT l.ctid FROM resource_labels l
                                 WHERE l.key = ol.key AND l.value = ol.value
                                   AND l.created_at = o.created_at AND l.resource_id = o.id
                                OFFSET 0) x
            WHERE o.labels <> '{}'));
    RETURN NULL;
END
$$;
