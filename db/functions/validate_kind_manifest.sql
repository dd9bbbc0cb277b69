-- validate_kind_manifest: the kind_manifest_legal CHECK, the DB half of the
-- manifest legality lattice. core/manifest.ValidateManifest is the Go half and
-- both must agree (core/manifest's corpus test checks them case by case), so a
-- manifest the API accepts is one the database accepts and vice versa.
-- The rules are checked in this order, first violation wins (raised through
-- manifest_violation):
--   unknown_field, kind_invalid, version_invalid, description_invalid,
--   schema_invalid, policy_invalid, finalizer_name_invalid, reactions_missing,
--   then per reaction: reaction_invalid, unknown_field, reaction_name_invalid,
--   reaction_name_duplicate, trigger_unknown, emits_invalid, reads_invalid,
--   verb_without_operation, operation_requires_verb, verb_duplicate,
--   finalizer_without_delete, delete_requires_finalizer, finalizer_mismatch,
--   composer_requires_status, composer_side_effect,
--   reactor_emits_side_effect_only;
--   then multiple_composers, multiple_rollups, multiple_reactors,
--   multiple_workers, multiple_resyncs, multiple_deleters.
-- The broker runs the first worker (specChange not emitting children),
-- resync and deleteRequested reaction, so a second of any would never run;
-- resources are seeded with finalizer_name and the delete removes the
-- deleter's own finalizer, so the two must be the same when both are set.
-- IMMUTABLE because a CHECK needs it; a change here does not re-check stored
-- manifests.
CREATE OR REPLACE FUNCTION validate_kind_manifest(m jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    k          text;
    r          jsonb;
    i          int;
    e          jsonb;
    v_trigger  text;
    v_emits    text[];
    v_reads    text[];
    v_names    text[] := '{}';
    v_verbs    text[] := '{}';
    v_composers int := 0;
    v_rollups   int := 0;
    v_reactors  int := 0;
    v_workers   int := 0;
    v_resyncs   int := 0;
    v_deleters  int := 0;
    v_ptr      text;
    c_top      text[] := ARRAY['kind','version','description','spec_schema','status_schema','config_schema',
                               'reactions','finalizer_name','max_inflight','task_deadline_secs',
                               'resync_interval_secs','resync_recomposes','orphan_grace_secs',
                               'max_transient_attempts'];
    c_rkeys    text[] := ARRAY['name','trigger','emits','verb','finalizer','reads'];
    c_triggers text[] := ARRAY['specChange','childrenSettled','deleteRequested','operation','reactor','resync'];
    c_outcomes text[] := ARRAY['children','edges','configs','status','conditions','finalizer','operationOutput','sideEffect'];
    c_reads    text[] := ARRAY['spec','status','labels','finalizers','childStatus'];
BEGIN
    IF m IS NULL OR jsonb_typeof(m) <> 'object' THEN
        RETURN manifest_violation('', 'must be a JSON object', 'unknown_field');
    END IF;
    FOR k IN SELECT key FROM jsonb_object_keys(m) AS key ORDER BY key COLLATE "C" LOOP
        IF NOT k = ANY (c_top) THEN
            RETURN manifest_violation('/' || replace(replace(k, '~', '~0'), '/', '~1'), 'unknown field', 'unknown_field');
        END IF;
    END LOOP;

    IF jsonb_typeof(m->'kind') IS DISTINCT FROM 'string'
       OR (m->>'kind') !~ '^[a-z][a-z0-9-]{0,62}$' THEN
        RETURN manifest_violation('/kind', 'must be a lowercase name matching ^[a-z][a-z0-9-]{0,62}$', 'kind_invalid');
    END IF;
    IF m ? 'version' AND (jsonb_typeof(m->'version') IS DISTINCT FROM 'string'
                          OR (m->>'version') !~ '^v[0-9]+((alpha|beta)[0-9]+)?$') THEN
        RETURN manifest_violation('/version', 'must look like v1, v2beta1 or v1alpha2', 'version_invalid');
    END IF;
    IF m ? 'description' AND jsonb_typeof(m->'description') NOT IN ('string', 'null') THEN
        RETURN manifest_violation('/description', 'must be a string', 'description_invalid');
    END IF;
    FOREACH k IN ARRAY ARRAY['config_schema','spec_schema','status_schema'] LOOP
        IF m ? k AND jsonb_typeof(m->k) NOT IN ('object', 'boolean', 'null') THEN
            RETURN manifest_violation('/' || k, 'must be a JSON Schema object', 'schema_invalid');
        END IF;
    END LOOP;
    FOREACH k IN ARRAY ARRAY['max_inflight','max_transient_attempts','orphan_grace_secs','resync_interval_secs',
                             'task_deadline_secs'] LOOP
        IF m ? k AND (jsonb_typeof(m->k) IS DISTINCT FROM 'number'
                      OR (m->>k)::numeric <> trunc((m->>k)::numeric)
                      OR (m->>k)::numeric < 0
                      OR (m->>k)::numeric > 2147483647) THEN
            RETURN manifest_violation('/' || k, 'must be a non-negative integer', 'policy_invalid');
        END IF;
    END LOOP;
    IF m ? 'resync_recomposes' AND jsonb_typeof(m->'resync_recomposes') IS DISTINCT FROM 'boolean' THEN
        RETURN manifest_violation('/resync_recomposes', 'must be a boolean', 'policy_invalid');
    END IF;
    IF m ? 'finalizer_name' AND jsonb_typeof(m->'finalizer_name') NOT IN ('string', 'null') THEN
        RETURN manifest_violation('/finalizer_name', 'must be a string', 'finalizer_name_invalid');
    END IF;
    IF jsonb_typeof(m->'reactions') IS DISTINCT FROM 'array' OR jsonb_array_length(m->'reactions') = 0 THEN
        RETURN manifest_violation('/reactions', 'must declare at least one reaction', 'reactions_missing');
    END IF;

    FOR i IN 0 .. jsonb_array_length(m->'reactions') - 1 LOOP
        r := m->'reactions'->i;
        v_ptr := '/reactions/' || i;
        IF jsonb_typeof(r) <> 'object' THEN
            RETURN manifest_violation(v_ptr, 'must be an object', 'reaction_invalid');
        END IF;
        FOR k IN SELECT key FROM jsonb_object_keys(r) AS key ORDER BY key COLLATE "C" LOOP
            IF NOT k = ANY (c_rkeys) THEN
                RETURN manifest_violation(v_ptr || '/' || replace(replace(k, '~', '~0'), '/', '~1'), 'unknown field', 'unknown_field');
            END IF;
        END LOOP;
        IF jsonb_typeof(r->'name') IS DISTINCT FROM 'string' OR (r->>'name') !~ '^[A-Za-z][A-Za-z0-9_-]{0,62}$' THEN
            RETURN manifest_violation(v_ptr || '/name', 'must be a name matching ^[A-Za-z][A-Za-z0-9_-]{0,62}$', 'reaction_name_invalid');
        END IF;
        IF (r->>'name') = ANY (v_names) THEN
            RETURN manifest_violation(v_ptr || '/name', format('duplicate reaction name %L', r->>'name'), 'reaction_name_duplicate');
        END IF;
        v_names := v_names || (r->>'name');
        IF jsonb_typeof(r->'trigger') IS DISTINCT FROM 'string' OR NOT (r->>'trigger') = ANY (c_triggers) THEN
            RETURN manifest_violation(v_ptr || '/trigger',
                'must be one of specChange, childrenSettled, deleteRequested, operation, reactor, resync', 'trigger_unknown');
        END IF;
        v_trigger := r->>'trigger';
        IF jsonb_typeof(r->'emits') IS DISTINCT FROM 'array' OR jsonb_array_length(r->'emits') = 0 THEN
            RETURN manifest_violation(v_ptr || '/emits', 'must list at least one outcome', 'emits_invalid');
        END IF;
        v_emits := '{}';
        FOR e IN SELECT value FROM jsonb_array_elements(r->'emits') LOOP
            IF jsonb_typeof(e) <> 'string' OR NOT (e #>> '{}') = ANY (c_outcomes) THEN
                RETURN manifest_violation(v_ptr || '/emits',
                    'outcomes must be among children, edges, configs, status, conditions, finalizer, operationOutput, sideEffect', 'emits_invalid');
            END IF;
            IF (e #>> '{}') = ANY (v_emits) THEN
                RETURN manifest_violation(v_ptr || '/emits', format('duplicate outcome %L', e #>> '{}'), 'emits_invalid');
            END IF;
            v_emits := v_emits || (e #>> '{}');
        END LOOP;
        -- reads is optional (absent: the handler reads every part); each
        -- element is checked in turn: known, not a duplicate, its trigger.
        IF r ? 'reads' THEN
            IF jsonb_typeof(r->'reads') IS DISTINCT FROM 'array' THEN
                RETURN manifest_violation(v_ptr || '/reads',
                    'must be an array of parts among spec, status, labels, finalizers, childStatus', 'reads_invalid');
            END IF;
            v_reads := '{}';
            FOR e IN SELECT value FROM jsonb_array_elements(r->'reads') LOOP
                IF jsonb_typeof(e) <> 'string' OR NOT (e #>> '{}') = ANY (c_reads) THEN
                    RETURN manifest_violation(v_ptr || '/reads',
                        'parts must be among spec, status, labels, finalizers, childStatus', 'reads_invalid');
                END IF;
                IF (e #>> '{}') = ANY (v_reads) THEN
                    RETURN manifest_violation(v_ptr || '/reads', format('duplicate read %L', e #>> '{}'), 'reads_invalid');
                END IF;
                IF (e #>> '{}') = 'childStatus' AND v_trigger <> 'childrenSettled' THEN
                    RETURN manifest_violation(v_ptr || '/reads', 'childStatus is only for childrenSettled reactions', 'reads_invalid');
                END IF;
                v_reads := v_reads || (e #>> '{}');
            END LOOP;
        END IF;

        IF r ? 'verb' AND jsonb_typeof(r->'verb') IS DISTINCT FROM 'null' AND coalesce(r->>'verb', '') <> '' AND v_trigger <> 'operation' THEN
            RETURN manifest_violation(v_ptr || '/verb', 'verb is only for operation reactions', 'verb_without_operation');
        END IF;
        IF v_trigger = 'operation' THEN
            IF jsonb_typeof(r->'verb') IS DISTINCT FROM 'string' OR (r->>'verb') !~ '^[A-Za-z][A-Za-z0-9_-]{0,62}$' THEN
                RETURN manifest_violation(v_ptr || '/verb', 'operation reaction requires a verb', 'operation_requires_verb');
            END IF;
            IF (r->>'verb') = ANY (v_verbs) THEN
                RETURN manifest_violation(v_ptr || '/verb', format('duplicate operation verb %L', r->>'verb'), 'verb_duplicate');
            END IF;
            v_verbs := v_verbs || (r->>'verb');
        END IF;
        IF r ? 'finalizer' AND jsonb_typeof(r->'finalizer') IS DISTINCT FROM 'null' AND coalesce(r->>'finalizer', '') <> ''
           AND v_trigger <> 'deleteRequested' THEN
            RETURN manifest_violation(v_ptr || '/finalizer', 'finalizer is only for deleteRequested reactions', 'finalizer_without_delete');
        END IF;
        IF v_trigger = 'deleteRequested' AND jsonb_typeof(r->'finalizer') NOT IN ('string', 'null') THEN
            RETURN manifest_violation(v_ptr || '/finalizer', 'must be a string', 'delete_requires_finalizer');
        END IF;
        IF v_trigger = 'deleteRequested'
           AND coalesce(CASE WHEN jsonb_typeof(r->'finalizer') = 'string' THEN r->>'finalizer' END, '') = ''
           AND coalesce(CASE WHEN jsonb_typeof(m->'finalizer_name') = 'string' THEN m->>'finalizer_name' END, '') = '' THEN
            RETURN manifest_violation(v_ptr || '/finalizer',
                'deleteRequested reaction requires a finalizer (on the reaction or finalizer_name)', 'delete_requires_finalizer');
        END IF;
        IF v_trigger = 'deleteRequested'
           AND coalesce(CASE WHEN jsonb_typeof(r->'finalizer') = 'string' THEN r->>'finalizer' END, '') <> ''
           AND coalesce(CASE WHEN jsonb_typeof(m->'finalizer_name') = 'string' THEN m->>'finalizer_name' END, '') <> ''
           AND (r->>'finalizer') <> (m->>'finalizer_name') THEN
            RETURN manifest_violation(v_ptr || '/finalizer',
                format('must equal finalizer_name ''%s'' (or be left out): resources are seeded with finalizer_name', m->>'finalizer_name'),
                'finalizer_mismatch');
        END IF;
        IF v_trigger = 'specChange' AND 'children' = ANY (v_emits) THEN
            IF NOT ('status' = ANY (v_emits) OR 'conditions' = ANY (v_emits)) THEN
                RETURN manifest_violation(v_ptr || '/emits', 'a composer (specChange emitting children) must also emit status or conditions',
                    'composer_requires_status');
            END IF;
            IF 'sideEffect' = ANY (v_emits) THEN
                RETURN manifest_violation(v_ptr || '/emits', 'a composer (specChange emitting children) may not emit sideEffect',
                    'composer_side_effect');
            END IF;
            v_composers := v_composers + 1;
        END IF;
        IF v_trigger = 'reactor' THEN
            IF v_emits <> ARRAY['sideEffect'] THEN
                RETURN manifest_violation(v_ptr || '/emits', 'a reactor reaction must emit sideEffect and nothing else',
                    'reactor_emits_side_effect_only');
            END IF;
            v_reactors := v_reactors + 1;
        END IF;
        IF v_trigger = 'childrenSettled' AND 'status' = ANY (v_emits) THEN
            v_rollups := v_rollups + 1;
        END IF;
        IF v_trigger = 'specChange' AND NOT 'children' = ANY (v_emits) THEN
            v_workers := v_workers + 1;
        ELSIF v_trigger = 'resync' THEN
            v_resyncs := v_resyncs + 1;
        ELSIF v_trigger = 'deleteRequested' THEN
            v_deleters := v_deleters + 1;
        END IF;
    END LOOP;

    IF v_composers > 1 THEN
        RETURN manifest_violation('/reactions', 'at most one composer (specChange emitting children) per kind', 'multiple_composers');
    END IF;
    IF v_rollups > 1 THEN
        RETURN manifest_violation('/reactions', 'at most one rollup (childrenSettled emitting status) per kind', 'multiple_rollups');
    END IF;
    IF v_reactors > 1 THEN
        RETURN manifest_violation('/reactions', 'at most one reactor reaction per kind', 'multiple_reactors');
    END IF;
    IF v_workers > 1 THEN
        RETURN manifest_violation('/reactions', 'at most one worker (specChange not emitting children) per kind', 'multiple_workers');
    END IF;
    IF v_resyncs > 1 THEN
        RETURN manifest_violation('/reactions', 'at most one resync reaction per kind', 'multiple_resyncs');
    END IF;
    IF v_deleters > 1 THEN
        RETURN manifest_violation('/reactions', 'at most one deleteRequested reaction per kind', 'multiple_deleters');
    END IF;
    RETURN true;
END
$$;
