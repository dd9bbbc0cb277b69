-- work_queue_delete_tids deletes queue rows by their row addresses, given
-- as one entry a partition: p_parts[i] names the partition and p_tids[i]
-- the text of its tid[] (what array_agg(ctid)::text gives). The callers
-- find the rows from their own rows outward — a LATERAL probe of the row's
-- partition's primary key, FOR UPDATE so the addresses stay theirs until
-- the delete — because written as one join, a queue whose statistics were
-- taken while it was drained (it looks empty however much it holds) lets
-- the planner run the join the other way round: every partition's primary
-- key read, each entry checked against the rows. A TID is unique only
-- within its partition, so each partition's delete is its own statement,
-- all in one. Nothing to delete (NULL): nothing runs.
CREATE OR REPLACE FUNCTION work_queue_delete_tids(p_parts regclass[], p_tids text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_ctes text[] := '{}';
BEGIN
    IF p_parts IS NULL THEN
        RETURN;
    END IF;
    FOR i IN 1 .. cardinality(p_parts) LOOP
        v_ctes := v_ctes || format('d%s AS (DELETE FROM %s w WHERE w.ctid = ANY (%L::tid[]))', i, p_parts[i], p_tids[i]);
    END LOOP;
    EXECUTE 'WITH ' || array_to_string(v_ctes, ', ') || ' SELECT 1';
END
$$;
