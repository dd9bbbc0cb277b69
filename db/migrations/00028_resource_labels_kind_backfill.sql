-- 00028_resource_labels_kind_backfill: the kind_label of every label row
-- written before 00027 (later rows get theirs from the trigger that writes
-- them, or from resource_labels_fill_kind).
--
-- In batches of 100 pages of resource_labels (a TID range scan, about 6,000
-- rows), each committed on its own, outside a transaction: one UPDATE of
-- the whole table held a row lock on every label row until it committed —
-- 2 min 42 s for the 2.2 million label rows of 1M resources on the slow,
-- shared host (931 MB of WAL) — and deleting a labelled resource, or
-- changing its labels, waited for it all that time. A batch holds its rows'
-- locks for its own length only, takes ROW EXCLUSIVE on resource_labels
-- (which queues no read or write behind it), and waits at most 2 s for a
-- row another transaction holds, then tries the batch again (as after a
-- deadlock with a delete that locks the batch's rows in another order).
-- Rows are never updated in place otherwise (a label change deletes and
-- inserts), so a row written before 00027 stays in the pages counted at
-- the start; each row's kind is read by primary key (a subquery: no batch
-- joins the whole of resources). At 100k resources (220,000 label rows) the batches took
-- 9.9 s together, about 0.3 s each, and 93 MB of WAL. The old row versions
-- are autovacuum's to reclaim.

-- +goose NO TRANSACTION
-- +goose Up
-- +goose StatementBegin
DO $$
DECLARE
    pages bigint := pg_relation_size('resource_labels') / current_setting('block_size')::bigint;
    first bigint := 0;
    step constant bigint := 100;
BEGIN
    WHILE first < pages LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '2s', true);
            UPDATE resource_labels l
               SET kind_label = (SELECT r.kind FROM resources r WHERE r.id = l.resource_id) || ':' || l.key || '=' || l.value
             WHERE l.ctid >= format('(%s,0)', first)::tid AND l.ctid < format('(%s,0)', first + step)::tid
               AND l.kind_label IS NULL;
            first := first + step;
        EXCEPTION WHEN lock_not_available OR deadlock_detected THEN
            PERFORM pg_sleep(0.1);
        END;
        COMMIT;
    END LOOP;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- Nothing to undo: 00027's down drops the column.
