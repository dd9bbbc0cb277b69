-- kind_manifest_finalizer: the finalizer a kind puts on its resources — the
-- manifest's finalizer_name, else the first deleteRequested reaction's
-- finalizer, else NULL (no teardown task: a delete removes the row at once).
CREATE OR REPLACE FUNCTION kind_manifest_finalizer(m jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(
        nullif(CASE WHEN jsonb_typeof(m->'finalizer_name') = 'string' THEN m->>'finalizer_name' END, ''),
        (SELECT nullif(r->>'finalizer', '') FROM jsonb_array_elements(m->'reactions') r
          WHERE r->>'trigger' = 'deleteRequested' AND jsonb_typeof(r->'finalizer') = 'string'
          LIMIT 1))
$$;
