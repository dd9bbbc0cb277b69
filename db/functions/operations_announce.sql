-- operations_announce: resource_operations rows inserted or updated (the
-- claim marks them Running, the drain Succeeded/Failed), for operationUpdated.
CREATE OR REPLACE FUNCTION operations_announce() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_n       bigint;
    v_payload text;
BEGIN
    SELECT count(*) INTO v_n FROM new_rows;
    IF v_n = 0 THEN
        RETURN NULL;
    END IF;
    IF v_n > announce_cap() THEN
        PERFORM pg_notify('operation_changed', '*');
        RETURN NULL;
    END IF;
    FOR v_payload IN
        SELECT string_agg(id::text, ',')
          FROM (SELECT n.id, (row_number() OVER () - 1) / 200 AS chunk FROM new_rows n) x
         GROUP BY chunk
    LOOP
        PERFORM pg_notify('operation_changed', v_payload);
    END LOOP;
    RETURN NULL;
END
$$;
