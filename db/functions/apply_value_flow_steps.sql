-- apply_value_flow_steps: apply_value_flows' general case, step by step
-- (apply_value_flows takes a single one-segment flow inline and hands every
-- other input here): substitute into a dependent's spec, in order, the flows
-- of each upstream in p_srcs = [[value_flows, upstream status], …]: for each
-- flow whose src_field is present in the status, set dep_field to it,
-- creating missing intermediate objects. A flow whose path runs through a
-- scalar, or indexes an array with a non-number, is skipped rather than
-- raised: a bad flow must never wedge a drain batch.
--
-- Simple expressions only, pointers parsed inline (json_pointer_path only for
-- pointers with ~ escapes), a one-segment dep_field set directly, a deeper one
-- walked one level at a time from its parent node rather than re-read from
-- the root at every level.
CREATE OR REPLACE FUNCTION apply_value_flow_steps(p_spec jsonb, p_srcs jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v_doc    jsonb := p_spec;
    v_init   boolean := false;
    v_flows  jsonb;
    v_status jsonb;
    v_flow   jsonb;
    v_src    jsonb;
    v_dep    jsonb;
    v_val    jsonb;
    v_ptr    text;
    v_path   text[];
    v_node   jsonb;
    v_child  jsonb;
    v_n      int;
    v_ok     boolean;
    s        int;
    f        int;
    i        int;
BEGIN
    IF jsonb_typeof(p_srcs) IS DISTINCT FROM 'array' THEN
        RETURN p_spec;
    END IF;
    FOR s IN 0 .. jsonb_array_length(p_srcs) - 1 LOOP
        v_flows := p_srcs->s->0;
        v_status := p_srcs->s->1;
        CONTINUE WHEN jsonb_typeof(v_flows) IS DISTINCT FROM 'array' OR v_status IS NULL;
        FOR f IN 0 .. jsonb_array_length(v_flows) - 1 LOOP
            v_flow := v_flows->f;
            v_src := v_flow->'src_field';
            v_dep := v_flow->'dep_field';
            CONTINUE WHEN jsonb_typeof(v_src) IS DISTINCT FROM 'string'
                       OR jsonb_typeof(v_dep) IS DISTINCT FROM 'string';
            v_ptr := v_src #>> '{}';
            v_val := v_status #> CASE WHEN v_ptr IN ('', '/') THEN '{}'::text[]
                                      WHEN strpos(v_ptr, '~') = 0 THEN string_to_array(substr(v_ptr, 2), '/')
                                      ELSE json_pointer_path(v_ptr) END;
            CONTINUE WHEN v_val IS NULL;
            v_ptr := v_dep #>> '{}';
            CONTINUE WHEN v_ptr IN ('', '/');
            v_path := CASE WHEN strpos(v_ptr, '~') = 0 THEN string_to_array(substr(v_ptr, 2), '/')
                           ELSE json_pointer_path(v_ptr) END;
            v_n := cardinality(v_path);
            CONTINUE WHEN v_n = 0;
            IF NOT v_init THEN
                -- jsonb_set keeps an object or array one, so this holds from here on
                IF v_doc IS NULL OR jsonb_typeof(v_doc) NOT IN ('object', 'array') THEN
                    v_doc := '{}';
                END IF;
                v_init := true;
            END IF;
            IF v_n = 1 THEN
                IF jsonb_typeof(v_doc) = 'array' AND v_path[1] !~ '^-?[0-9]+$' THEN
                    CONTINUE;
                END IF;
                v_doc := jsonb_set(v_doc, v_path, v_val, true);
                CONTINUE;
            END IF;
            -- v_node is the container of level i: v_doc #> v_path[1:i - 1]
            v_node := v_doc;
            v_ok := true;
            FOR i IN 1 .. v_n LOOP
                IF jsonb_typeof(v_node) = 'array' AND v_path[i] !~ '^-?[0-9]+$' THEN
                    v_ok := false;
                    EXIT;
                END IF;
                EXIT WHEN i = v_n;
                v_child := v_node #> v_path[i:i];
                IF v_child IS NULL THEN
                    v_doc := jsonb_set(v_doc, v_path[1:i], '{}', true);
                    -- re-read: an out-of-range array index appends elsewhere
                    v_node := v_doc #> v_path[1:i];
                ELSIF jsonb_typeof(v_child) NOT IN ('object', 'array') THEN
                    v_ok := false;   -- a scalar in the way: leave the spec alone
                    EXIT;
                ELSE
                    v_node := v_child;
                END IF;
            END LOOP;
            CONTINUE WHEN NOT v_ok;
            v_doc := jsonb_set(v_doc, v_path, v_val, true);
        END LOOP;
    END LOOP;
    RETURN v_doc;
END
$$;
