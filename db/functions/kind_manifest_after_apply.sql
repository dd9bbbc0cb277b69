-- kind_manifest_after_apply (AFTER INSERT OR UPDATE ON kind_manifest) keeps
-- kind_config in step with the manifest: the policy columns are seeded
-- insert-if-absent, so an operator's live edit of kind_config survives a
-- re-apply (max_transient_attempts, absent, seeds 20), while the projection plpgsql reads instead of a Go registry
-- (finalizer_name, has_composer, has_rollup, is_reactor) follows every apply,
-- written only when it changed. Announces on kind_manifest_changed
-- ("<kind>/<version>") so every pod's manifest cache reloads.
CREATE OR REPLACE FUNCTION kind_manifest_after_apply() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    m jsonb := NEW.manifest;
    v_composer boolean;
    v_rollup boolean;
BEGIN
    SELECT bool_or(r->>'trigger' = 'specChange' AND r->'emits' ? 'children'),
           bool_or(r->>'trigger' = 'childrenSettled' AND r->'emits' ? 'status')
      INTO v_composer, v_rollup
      FROM jsonb_array_elements(m->'reactions') r;
    INSERT INTO kind_config AS c (kind, version, max_inflight, task_deadline_secs, resync_interval_secs,
                                  resync_recomposes, orphan_grace_secs, max_transient_attempts, finalizer_name,
                                  has_composer, has_rollup, is_reactor)
    VALUES (NEW.kind, NEW.version,
            coalesce((m->>'max_inflight')::numeric::int, 0),
            coalesce((m->>'task_deadline_secs')::numeric::int, 0),
            coalesce((m->>'resync_interval_secs')::numeric::int, 0),
            coalesce((m->>'resync_recomposes')::boolean, false),
            coalesce((m->>'orphan_grace_secs')::numeric::int, 0),
            coalesce((m->>'max_transient_attempts')::numeric::int, 20),
            kind_manifest_finalizer(m),
            coalesce(v_composer, false), coalesce(v_rollup, false), NEW.is_reactor)
    ON CONFLICT (kind, version) DO UPDATE
        SET finalizer_name = EXCLUDED.finalizer_name,
            has_composer   = EXCLUDED.has_composer,
            has_rollup     = EXCLUDED.has_rollup,
            is_reactor     = EXCLUDED.is_reactor
        WHERE (c.finalizer_name, c.has_composer, c.has_rollup, c.is_reactor)
              IS DISTINCT FROM (EXCLUDED.finalizer_name, EXCLUDED.has_composer, EXCLUDED.has_rollup, EXCLUDED.is_reactor);
    PERFORM pg_notify('kind_manifest_changed', NEW.kind || '/' || NEW.version);
    RETURN NULL;
END
$$;
