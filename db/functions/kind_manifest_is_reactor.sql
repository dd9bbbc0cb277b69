-- kind_manifest_is_reactor generates kind_manifest.is_reactor: a reactor kind
-- declares only reactor reactions (and at least one). Reactor kinds are run by
-- lifecycle bindings, never scheduled by spec changes. IMMUTABLE because a
-- generated column needs it; a change here does not recompute stored rows.
CREATE OR REPLACE FUNCTION kind_manifest_is_reactor(m jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(bool_and(r->>'trigger' = 'reactor'), false)
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(m->'reactions') = 'array' THEN m->'reactions' ELSE '[]' END) r
$$;
