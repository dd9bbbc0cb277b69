-- resources_labels_delete (AFTER DELETE, per statement) removes the deleted
-- resources' resource_labels rows; rows without labels are filtered before
-- their jsonb_each_text call. Each label row is one probe of the primary key
-- on all four of its columns, and two things hold it there, because the
-- transition table carries no statistics and jsonb_each_text is costed at
-- 100 rows a call:
--   - hash and merge joins are off, as in the other transition-table
--     triggers (a merge join over the whole primary key read 1.8 million
--     index entries for every deleting statement of a 1M fleet's teardown);
--   - the labels to remove are gathered first (a MATERIALIZED CTE), so the
--     probe's one source carries the whole key. Joined directly, the planner
--     found probing by the deleted row alone cheaper than by each of its
--     hundred supposed labels: an index scan by the key's last two columns
--     (created_at, resource_id), which checks every entry of the index — a
--     compose's children share their labels' values and their created_at —
--     250 pages a label in a 20k fleet's teardown.
CREATE OR REPLACE FUNCTION resources_labels_delete() RETURNS trigger
LANGUAGE plpgsql SET jit = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
BEGIN
    WITH gone AS MATERIALIZED (
        SELECT ol.key, ol.value, o.created_at, o.id
          FROM old_rows o CROSS JOIN LATERAL jsonb_each_text(o.labels) ol
         WHERE o.labels <> '{}')
    DELETE FROM resource_labels l
     USING gone g
     WHERE l.key = g.key AND l.value = g.value AND l.created_at = g.created_at AND l.resource_id = g.id;
    RETURN NULL;
END
$$;
