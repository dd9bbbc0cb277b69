-- apply_value_flows: substitute into a dependent's spec, in order, the flows
-- of each upstream in p_srcs = [[value_flows, upstream status], …]: for each
-- flow whose src_field is present in the status, set dep_field to it,
-- creating missing intermediate objects. A flow whose path runs through a
-- scalar, or indexes an array with a non-number, is skipped rather than
-- raised: a bad flow must never wedge a drain batch. Simple expressions only.
CREATE OR REPLACE FUNCTION apply_value_flows(p_spec jsonb, p_srcs jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
    v_doc    jsonb := p_spec;
    v_flows  jsonb;
    v_status jsonb;
    v_flow   jsonb;
    v_val    jsonb;
    v_path   text[];
    v_node   jsonb;
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
            CONTINUE WHEN jsonb_typeof(v_flow->'src_field') IS DISTINCT FROM 'string'
                       OR jsonb_typeof(v_flow->'dep_field') IS DISTINCT FROM 'string';
            v_val := v_status #> json_pointer_path(v_flow->>'src_field');
            CONTINUE WHEN v_val IS NULL;
            v_path := json_pointer_path(v_flow->>'dep_field');
            CONTINUE WHEN cardinality(v_path) = 0;
            IF v_doc IS NULL OR jsonb_typeof(v_doc) NOT IN ('object', 'array') THEN
                v_doc := '{}';
            END IF;
            v_ok := true;
            FOR i IN 1 .. cardinality(v_path) LOOP
                v_node := CASE WHEN i = 1 THEN v_doc ELSE v_doc #> v_path[1:i - 1] END;
                IF jsonb_typeof(v_node) = 'array' AND v_path[i] !~ '^-?[0-9]+$' THEN
                    v_ok := false;
                    EXIT;
                END IF;
                IF i < cardinality(v_path) THEN
                    v_node := v_doc #> v_path[1:i];
                    IF v_node IS NULL THEN
                        v_doc := jsonb_set(v_doc, v_path[1:i], '{}', true);
                    ELSIF jsonb_typeof(v_node) NOT IN ('object', 'array') THEN
                        v_ok := false;   -- a scalar in the way: leave the spec alone
                        EXIT;
                    END IF;
                END IF;
            END LOOP;
            CONTINUE WHEN NOT v_ok;
            v_doc := jsonb_set(v_doc, v_path, v_val, true);
        END LOOP;
    END LOOP;
    RETURN v_doc;
END
$$;
