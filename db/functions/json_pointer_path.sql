-- json_pointer_path: an RFC 6901 pointer as a jsonb path ('/a/b~1c' → {a,b/c}).
-- plpgsql on simple expressions only: no query per call.
CREATE OR REPLACE FUNCTION json_pointer_path(p_pointer text) RETURNS text[]
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    v_path text[];
    i      int;
BEGIN
    IF p_pointer IN ('', '/') THEN
        RETURN '{}';
    END IF;
    v_path := string_to_array(substr(p_pointer, 2), '/');
    IF strpos(p_pointer, '~') > 0 THEN
        FOR i IN 1 .. cardinality(v_path) LOOP
            v_path[i] := replace(replace(v_path[i], '~1', '/'), '~0', '~');
        END LOOP;
    END IF;
    RETURN v_path;
END
$$;
