-- resources_labels_delete (AFTER DELETE, per statement) removes the deleted
-- resources' resource_labels rows; rows without labels are filtered before
-- their jsonb_each_text call. Each label row is one probe of the primary key
-- on all four of its columns, and two things hold it there, because the
-- transition table carries no statistics and jsonb_each_text is costed at
-- 100 rows a call:
--   - hash and merge joins are off, as in the other transition-table
--     triggers (a merge join over the whole primary key read 1.8 million
--     index entries for every deleting statement of a 1M fleet's teardown);
--   - each label row is found by a LATERAL probe with its whole key, from
--     the deleted row's labels (OFFSET 0 keeps the probe a subquery, run
--     inside the loop over them), and deleted by the TID the probe found (a
--     Tid Scan; the rows are the deleted resources', which this transaction
--     holds). Joined directly, the planner found probing by the deleted row
--     alone cheaper than by each of its hundred supposed labels: an index
--     scan by the key's last two columns (created_at, resource_id), which
--     checks every entry of the index — a compose's children share their
--     labels' values and their created_at — 250 pages a label in a 20k
--     fleet's teardown. Joined through a gathered CTE instead, a session
--     whose plan was made on an empty label table (or one analyzed empty)
--     kept a loop over the whole primary key, each entry checked against
--     the labels: 6,700 buffers for 100 rows of a 10k fleet
--     (TestPlans_TeardownSessionPlannedOnEmptyTables).
CREATE OR REPLACE FUNCTION resources_labels_delete() RETURNS trigger
LANGUAGE plpgsql SET jit = off SET enable_hashjoin = off SET enable_mergejoin = off AS $$
BEGIN
    DELETE FROM resource_labels l
     USING (SELECT x.tid
              FROM old_rows o
             CROSS JOIN LATERAL jsonb_each_text(o.labels) ol
             CROSS JOIN LATERAL (SELECT l.ctid AS tid FROM resource_labels l
                                  WHERE l.key = ol.key AND l.value = ol.value
                                    AND l.created_at = o.created_at AND l.resource_id = o.id
                                 OFFSET 0) x
             WHERE o.labels <> '{}') g
     WHERE l.ctid = g.tid;
    RETURN NULL;
END
$$;
