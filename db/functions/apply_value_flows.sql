-- apply_value_flows: substitute into a dependent's spec, in order, the flows
-- of each upstream in p_srcs = [[value_flows, upstream status], …]: for each
-- flow whose src_field is present in the status, set dep_field to it,
-- creating missing intermediate objects. A flow whose path runs through a
-- scalar, or indexes an array with a non-number, is skipped rather than
-- raised: a bad flow must never wedge a drain batch.
--
-- It runs once per dependent in every drain batch. The common input, one
-- upstream with one flow between one-segment pointers without escapes
-- ({"src_field":"/vpc_id","dep_field":"/vpc_id"}) into an object spec, is a
-- single jsonb_set here: a one-SELECT SQL function without FROM, which the
-- planner inlines into the calling statement, so it pays no function call.
-- The test reads p_srcs with #> and #>> once p_srcs->0 is known to be an
-- array (so '0' and '1' index it) and matches both pointers at once, joined
-- by a separator neither may hold; a pointer that is not a string never
-- matches, since its text never starts with '/'. Every other input, and a
-- src_field the status (an object) lacks, goes to apply_value_flow_steps
-- (plpgsql), the general case.
CREATE OR REPLACE FUNCTION apply_value_flows(p_spec jsonb, p_srcs jsonb) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE
        WHEN jsonb_typeof(p_spec) = 'object'
         AND jsonb_typeof(p_srcs->0) = 'array' AND p_srcs->1 IS NULL
         AND jsonb_typeof(p_srcs #> '{0,0}') = 'array' AND p_srcs #> '{0,0,1}' IS NULL
         AND (p_srcs #>> '{0,0,0,src_field}') || chr(1) || (p_srcs #>> '{0,0,0,dep_field}')
             ~ '^/[^/~\x01]+\x01/[^/~\x01]+$'
        THEN coalesce(jsonb_set(p_spec, ARRAY[substr(p_srcs #>> '{0,0,0,dep_field}', 2)],
                                p_srcs #> '{0,1}' -> substr(p_srcs #>> '{0,0,0,src_field}', 2), true),
                      apply_value_flow_steps(p_spec, p_srcs))
        ELSE apply_value_flow_steps(p_spec, p_srcs)
    END
$$;
