-- 00001_schema: the tables, the status model's generated columns, the manifest
-- legality CHECK and the small triggers that keep derived rows in step.
-- The scheduling functions (schedule, claim, drain, cascade, reap, delete,
-- orphan, quarantine, caps, shards) live in 00002_scheduling.sql.

-- +goose Up

-- ---------------------------------------------------------------------------
-- shard_of: the one sharding key. 256 logical shards; work_queue, work_outbox
-- and lifecycle_outbox are RANGE-partitioned into 16 partitions of 16 shards.
-- A partition key cannot be GENERATED, so writers store shard_of(id) in a plain
-- shard_id column.
-- +goose StatementBegin
CREATE FUNCTION shard_of(p_id uuid) RETURNS int
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT uuid_hash(p_id) & 255
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- notify_gated: the wake gate. A coalesced pg_notify(channel), at most about one
-- per window (50 ms) per channel across all backends, without blocking any
-- caller:
--   layer 1: an unlocked read of wake_state: inside the window → return;
--   layer 2: pg_try_advisory_xact_lock picks one winner, losers return at once;
--   layer 3: the winner stamps wake_state and emits the one pg_notify.
-- A wake is a latency hint, never the source of truth: listeners also poll.
CREATE TABLE wake_state (
    channel          text PRIMARY KEY,
    last_notified_at timestamptz NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION notify_gated(p_channel text,
                             p_window interval DEFAULT interval '50 milliseconds',
                             p_now timestamptz DEFAULT clock_timestamp())
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_last timestamptz;
BEGIN
    SELECT last_notified_at INTO v_last FROM wake_state WHERE channel = p_channel;
    IF v_last IS NOT NULL AND v_last > p_now - p_window THEN
        RETURN false;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('notify_gated'), hashtext(p_channel)) THEN
        RETURN false;
    END IF;
    INSERT INTO wake_state AS w (channel, last_notified_at) VALUES (p_channel, p_now)
    ON CONFLICT (channel) DO UPDATE SET last_notified_at = EXCLUDED.last_notified_at
        WHERE w.last_notified_at <= p_now - p_window;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(p_channel, '');
    RETURN true;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- Kind manifests (CRDs). validate_kind_manifest is the DB half of the legality
-- lattice; core/manifest.ValidateManifest is the Go half and both must agree
-- (core/manifest's corpus test checks them case by case). Violations raise
-- check_violation with "manifest <json-pointer>: <message> [<rule>]".
-- The rules are checked in this order, first violation wins:
--   unknown_field, kind_invalid, version_invalid, description_invalid,
--   schema_invalid, policy_invalid, finalizer_name_invalid, reactions_missing,
--   then per reaction: reaction_invalid, unknown_field, reaction_name_invalid,
--   reaction_name_duplicate, trigger_unknown, emits_invalid,
--   verb_without_operation, operation_requires_verb, verb_duplicate,
--   finalizer_without_delete, delete_requires_finalizer,
--   composer_requires_status, composer_side_effect,
--   reactor_emits_side_effect_only;
--   then multiple_composers, multiple_rollups, multiple_reactors.
-- +goose StatementBegin
CREATE FUNCTION manifest_violation(p_pointer text, p_message text, p_rule text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
        MESSAGE = format('manifest %s: %s [%s]', p_pointer, p_message, p_rule),
        CONSTRAINT = 'kind_manifest_legal';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION validate_kind_manifest(m jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    k          text;
    r          jsonb;
    i          int;
    e          jsonb;
    v_trigger  text;
    v_emits    text[];
    v_names    text[] := '{}';
    v_verbs    text[] := '{}';
    v_composers int := 0;
    v_rollups   int := 0;
    v_reactors  int := 0;
    v_ptr      text;
    c_top      text[] := ARRAY['kind','version','description','spec_schema','status_schema','config_schema',
                               'reactions','finalizer_name','max_inflight','task_deadline_secs',
                               'resync_interval_secs','resync_recomposes','orphan_grace_secs'];
    c_rkeys    text[] := ARRAY['name','trigger','emits','verb','finalizer'];
    c_triggers text[] := ARRAY['specChange','childrenSettled','deleteRequested','operation','reactor','resync'];
    c_outcomes text[] := ARRAY['children','edges','configs','status','conditions','finalizer','operationOutput','sideEffect'];
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
    FOREACH k IN ARRAY ARRAY['max_inflight','orphan_grace_secs','resync_interval_secs','task_deadline_secs'] LOOP
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
    RETURN true;
END
$$;
-- +goose StatementEnd

-- A reactor kind declares only reactor reactions (and at least one).
-- +goose StatementBegin
CREATE FUNCTION kind_manifest_is_reactor(m jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(bool_and(r->>'trigger' = 'reactor'), false)
      FROM jsonb_array_elements(CASE WHEN jsonb_typeof(m->'reactions') = 'array' THEN m->'reactions' ELSE '[]' END) r
$$;
-- +goose StatementEnd

CREATE TABLE kind_manifest (
    kind         text        NOT NULL,
    version      text        NOT NULL,
    manifest     jsonb       NOT NULL CONSTRAINT kind_manifest_legal CHECK (validate_kind_manifest(manifest)),
    -- manifest_gen bumps on every change of the document: the fence a task
    -- carries so a mid-flight manifest change is detectable.
    manifest_gen bigint      NOT NULL DEFAULT 1,
    is_reactor   boolean     GENERATED ALWAYS AS (kind_manifest_is_reactor(manifest)) STORED,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, version),
    CHECK (manifest->>'kind' = kind)
);

-- kind_config: the runtime-editable operational policy, one row per
-- (kind, version). The policy columns are seeded insert-if-absent from the
-- manifest so an operator's live edit is never clobbered by a re-apply; the
-- finalizer/rollup columns are a projection of the manifest that plpgsql reads
-- (the control plane has no Go registry) and follow every apply.
CREATE TABLE kind_config (
    kind                 text    NOT NULL,
    version              text    NOT NULL,
    max_inflight         int     NOT NULL DEFAULT 0 CHECK (max_inflight >= 0),
    task_deadline_secs   int     NOT NULL DEFAULT 0 CHECK (task_deadline_secs >= 0),
    resync_interval_secs int     NOT NULL DEFAULT 0 CHECK (resync_interval_secs >= 0),
    resync_recomposes    boolean NOT NULL DEFAULT false,
    orphan_grace_secs    int     NOT NULL DEFAULT 0 CHECK (orphan_grace_secs >= 0),
    finalizer_name       text,
    has_composer         boolean NOT NULL DEFAULT false,
    has_rollup           boolean NOT NULL DEFAULT false,
    is_reactor           boolean NOT NULL DEFAULT false,
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (kind, version)
);
CREATE INDEX idx_kind_config_kind ON kind_config (kind);

-- +goose StatementBegin
CREATE FUNCTION kind_manifest_finalizer(m jsonb) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(
        nullif(CASE WHEN jsonb_typeof(m->'finalizer_name') = 'string' THEN m->>'finalizer_name' END, ''),
        (SELECT nullif(r->>'finalizer', '') FROM jsonb_array_elements(m->'reactions') r
          WHERE r->>'trigger' = 'deleteRequested' AND jsonb_typeof(r->'finalizer') = 'string'
          LIMIT 1))
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION kind_manifest_after_apply() RETURNS trigger
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
                                  resync_recomposes, orphan_grace_secs, finalizer_name,
                                  has_composer, has_rollup, is_reactor)
    VALUES (NEW.kind, NEW.version,
            coalesce((m->>'max_inflight')::numeric::int, 0),
            coalesce((m->>'task_deadline_secs')::numeric::int, 0),
            coalesce((m->>'resync_interval_secs')::numeric::int, 0),
            coalesce((m->>'resync_recomposes')::boolean, false),
            coalesce((m->>'orphan_grace_secs')::numeric::int, 0),
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
-- +goose StatementEnd

CREATE TRIGGER kind_manifest_after_apply AFTER INSERT OR UPDATE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION kind_manifest_after_apply();

-- +goose StatementBegin
CREATE FUNCTION kind_manifest_after_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('kind_manifest_changed', OLD.kind || '/' || OLD.version);
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER kind_manifest_after_delete AFTER DELETE ON kind_manifest
    FOR EACH ROW EXECUTE FUNCTION kind_manifest_after_delete();

-- ---------------------------------------------------------------------------
-- resources: every root and composed child. Two readiness axes (synced_gen vs
-- generation; health_ok) plus failure_gen and frozen_until, collapsed into the
-- stored is_ready and phase columns that every list, count and filter reads.
CREATE TABLE resources (
    id                    uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    kind                  text        NOT NULL,
    version               text        NOT NULL,
    name                  text        NOT NULL,
    labels                jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object'),
    spec                  jsonb       NOT NULL DEFAULT '{}',
    status                jsonb,
    generation            bigint      NOT NULL DEFAULT 1,
    synced_gen            bigint      NOT NULL DEFAULT 0,
    composed_gen          bigint      NOT NULL DEFAULT 0,
    health_ok             boolean     NOT NULL DEFAULT true,
    failure_gen           bigint      NOT NULL DEFAULT 0,
    failure_terminal      boolean     NOT NULL DEFAULT false,
    deletion_requested_at timestamptz,
    finalizers            text[]      NOT NULL DEFAULT '{}',
    frozen_until          timestamptz,
    owner_id              uuid        REFERENCES resources (id) ON DELETE CASCADE,
    -- root_id: the top-level composition root of a composed child (NULL for a
    -- root). It makes "every live descendant of this root settled" one
    -- indexed probe (idx_resources_unsettled).
    root_id               uuid,
    provider_config_ref   text,
    shard_id              int         NOT NULL CHECK (shard_id BETWEEN 0 AND 255),
    created_at            timestamptz NOT NULL DEFAULT now(),
    updated_at            timestamptz NOT NULL DEFAULT now(),
    is_ready              boolean GENERATED ALWAYS AS (
        synced_gen >= generation AND health_ok AND deletion_requested_at IS NULL
    ) STORED,
    phase                 text GENERATED ALWAYS AS (
        CASE
            WHEN deletion_requested_at IS NOT NULL          THEN 'Deleting'
            WHEN frozen_until = 'infinity'                  THEN 'Quarantined'
            WHEN failure_gen = generation                   THEN 'Failed'
            WHEN frozen_until IS NOT NULL                   THEN 'Orphaned'
            WHEN synced_gen >= generation AND NOT health_ok THEN 'Degraded'
            WHEN synced_gen >= generation                   THEN 'Ready'
            ELSE 'Reconciling'
        END
    ) STORED,
    CONSTRAINT resources_kind_name_key UNIQUE (kind, name),
    CHECK (name ~ '^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$')
);

-- List paths: keyset (created_at DESC, id DESC) pages. Every list reads
-- through a phase-leading index, one LATERAL branch per phase (an unfiltered
-- list is the union of all seven), so three b-trees serve kind/phase/owner
-- filters without a sort and without a COUNT.
CREATE INDEX idx_resources_phase_page      ON resources (phase, created_at DESC, id DESC);
CREATE INDEX idx_resources_kind_phase_page ON resources (kind, phase, created_at DESC, id DESC);
CREATE INDEX idx_resources_owner_phase_page ON resources (owner_id, phase, created_at DESC, id DESC)
    WHERE owner_id IS NOT NULL;
CREATE INDEX idx_resources_labels ON resources USING gin (labels jsonb_path_ops);
-- Failed for the live spec: empty (zero maintenance) on a healthy fleet.
CREATE INDEX idx_resources_failed ON resources (shard_id) WHERE failure_gen = generation;
-- Orphaned (finite) and quarantined ('infinity') rows: the reaper's sweep idle gate.
CREATE INDEX idx_resources_frozen_sweep ON resources (frozen_until) WHERE frozen_until IS NOT NULL;
-- Soft-deleted rows still being torn down: sweep_deletable's idle gate.
CREATE INDEX idx_resources_deleting ON resources (shard_id) WHERE deletion_requested_at IS NOT NULL;
-- Live descendants of a root still progressing (not synced, not failed, not
-- frozen, not deleting): the rollup gate's NOT EXISTS probe.
CREATE INDEX idx_resources_unsettled ON resources (root_id)
    WHERE root_id IS NOT NULL AND synced_gen < generation AND failure_gen <> generation
      AND frozen_until IS NULL AND deletion_requested_at IS NULL;
-- Rows whose spec is ahead of what was reconciled: the reaper's catch-up scan.
CREATE INDEX idx_resources_lagging ON resources (shard_id, updated_at) WHERE synced_gen < generation;

-- generation bumps on a spec change and only then. The trigger is limited to
-- UPDATE OF spec with a WHEN clause, so the drainer's status writes never run it.
-- +goose StatementBegin
CREATE FUNCTION resources_bump_generation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.generation := OLD.generation + 1;
    RETURN NEW;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER resources_bump_generation BEFORE UPDATE OF spec ON resources
    FOR EACH ROW WHEN (OLD.spec IS DISTINCT FROM NEW.spec)
    EXECUTE FUNCTION resources_bump_generation();

-- ---------------------------------------------------------------------------
-- Phase counts at 1M rows: an append-only delta log written once per
-- statement (AFTER STATEMENT, transition tables; insert-only, so concurrent
-- drainers never contend on a counter row), folded into resource_phase_counts
-- by fold_phase_count_deltas(). A read is SUM(counts) + SUM(pending deltas).
CREATE TABLE resource_phase_counts (
    kind  text   NOT NULL,
    phase text   NOT NULL,
    n     bigint NOT NULL,
    PRIMARY KEY (kind, phase)
);

CREATE TABLE resource_phase_deltas (
    id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind  text   NOT NULL,
    phase text   NOT NULL,
    dn    bigint NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION resources_count_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_phase_deltas (kind, phase, dn)
    SELECT kind, phase, count(*) FROM new_rows GROUP BY kind, phase;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION resources_count_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_phase_deltas (kind, phase, dn)
    SELECT kind, phase, -count(*) FROM old_rows GROUP BY kind, phase;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION resources_count_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_phase_deltas (kind, phase, dn)
    SELECT kind, phase, sum(dn) FROM (
        SELECT o.kind, o.phase, -1 AS dn FROM old_rows o
        UNION ALL
        SELECT n.kind, n.phase, 1 FROM new_rows n
    ) d
    GROUP BY kind, phase
    HAVING sum(dn) <> 0;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER resources_count_insert AFTER INSERT ON resources
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION resources_count_insert();
CREATE TRIGGER resources_count_delete AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION resources_count_delete();
CREATE TRIGGER resources_count_update AFTER UPDATE ON resources
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION resources_count_update();

-- fold_phase_count_deltas moves pending deltas into resource_phase_counts.
-- One folder at a time (a non-blocking advisory lock); returns the number of
-- deltas folded (0 when another folder holds the lock).
-- +goose StatementBegin
CREATE FUNCTION fold_phase_count_deltas(p_max int DEFAULT 100000) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('fold_phase_count_deltas')) THEN
        RETURN 0;
    END IF;
    WITH batch AS (
        DELETE FROM resource_phase_deltas
         WHERE id IN (SELECT id FROM resource_phase_deltas ORDER BY id LIMIT p_max)
        RETURNING kind, phase, dn
    ), agg AS (
        SELECT kind, phase, sum(dn) AS dn, count(*) AS rows FROM batch GROUP BY kind, phase
    ), up AS (
        INSERT INTO resource_phase_counts AS c (kind, phase, n)
        SELECT kind, phase, dn FROM agg ORDER BY kind, phase
        ON CONFLICT (kind, phase) DO UPDATE SET n = c.n + EXCLUDED.n
    )
    SELECT coalesce(sum(rows), 0) INTO v_n FROM agg;
    DELETE FROM resource_phase_counts WHERE n = 0;
    RETURN v_n;
END
$$;
-- +goose StatementEnd

-- ---------------------------------------------------------------------------
-- resource_labels: each resource's labels, one row per (resource, label), keyed
-- for the list path. A label-filtered page walks its primary key backwards in
-- (created_at DESC, resource_id DESC) order from the cursor and stops after a
-- page of matches, instead of a GIN bitmap over every row carrying the label
-- plus a sort (1,000 heap visits for a label on 0.1% of 1M rows, 10,000 at
-- 10M). created_at is the resource's, copied (it never changes). Kept in step
-- by statement triggers on INSERT and DELETE and a row trigger on a change of
-- labels; status writes (the hot path) never SET labels, so never fire it.
CREATE TABLE resource_labels (
    resource_id uuid        NOT NULL,
    key         text        NOT NULL,
    value       text        NOT NULL,
    created_at  timestamptz NOT NULL,
    CONSTRAINT resource_labels_pkey PRIMARY KEY (key, value, created_at, resource_id)
);

-- +goose StatementBegin
CREATE FUNCTION resources_labels_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_labels (resource_id, key, value, created_at)
    SELECT n.id, l.key, l.value, n.created_at FROM new_rows n, jsonb_each_text(n.labels) l;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION resources_labels_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM resource_labels l
     USING old_rows o CROSS JOIN LATERAL jsonb_each_text(o.labels) ol
     WHERE l.key = ol.key AND l.value = ol.value AND l.created_at = o.created_at AND l.resource_id = o.id;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION resources_labels_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM resource_labels l
     USING jsonb_each_text(OLD.labels) ol
     WHERE l.key = ol.key AND l.value = ol.value AND l.created_at = OLD.created_at AND l.resource_id = OLD.id;
    INSERT INTO resource_labels (resource_id, key, value, created_at)
    SELECT NEW.id, l.key, l.value, NEW.created_at FROM jsonb_each_text(NEW.labels) l;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER resources_labels_insert AFTER INSERT ON resources
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION resources_labels_insert();
CREATE TRIGGER resources_labels_delete AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION resources_labels_delete();
CREATE TRIGGER resources_labels_update AFTER UPDATE OF labels ON resources
    FOR EACH ROW WHEN (OLD.labels IS DISTINCT FROM NEW.labels) EXECUTE FUNCTION resources_labels_update();

-- ---------------------------------------------------------------------------
-- Dependency edges between composed children, with their value flows:
-- [{"src_field": "/vpc_id", "dep_field": "/vpc_id"}] copies a field of the
-- upstream's status into the dependent's spec.
CREATE TABLE resource_deps (
    dependent_id  uuid  NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    dependency_id uuid  NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    value_flows   jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(value_flows) = 'array'),
    PRIMARY KEY (dependent_id, dependency_id),
    CHECK (dependent_id <> dependency_id)
);
CREATE INDEX idx_resource_deps_dependency ON resource_deps (dependency_id);

-- Rich conditions, written only on transition; pure decoration (the "why").
CREATE TABLE resource_conditions (
    resource_id          uuid        NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    type                 text        NOT NULL,
    status               text        NOT NULL CHECK (status IN ('True', 'False', 'Unknown')),
    reason               text,
    message              text,
    observed_generation  bigint      NOT NULL DEFAULT 0,
    last_transition_time timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, type)
);

-- Append-only history of a resource: compose, rollup, failure, delete and
-- operator actions. Read newest first by id cursor.
CREATE TABLE resource_events (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource_id uuid        NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    type        text        NOT NULL CHECK (type IN ('Normal', 'Warning')),
    reason      text        NOT NULL,
    message     text        NOT NULL DEFAULT '',
    actor       text        NOT NULL DEFAULT 'system',
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_resource_events_resource ON resource_events (resource_id, id DESC);

-- ---------------------------------------------------------------------------
-- Provider configs: one JSON document per consumer kind, at most one default.
-- owner_id is the composing root for composer-produced configs (NULL for
-- hand-authored ones) and cascades with it.
CREATE TABLE providerconfigs (
    id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    kind       text        NOT NULL,
    name       text        NOT NULL,
    is_default boolean     NOT NULL DEFAULT false,
    spec       jsonb       NOT NULL DEFAULT '{}',
    data       jsonb,
    owner_id   uuid        REFERENCES resources (id) ON DELETE CASCADE,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT providerconfigs_kind_name_key UNIQUE (kind, name),
    CHECK (name ~ '^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$')
);
CREATE UNIQUE INDEX providerconfigs_one_default ON providerconfigs (kind) WHERE is_default;
CREATE INDEX idx_providerconfigs_owner ON providerconfigs (owner_id) WHERE owner_id IS NOT NULL;
CREATE INDEX idx_providerconfigs_page ON providerconfigs (created_at DESC, id DESC);

-- +goose StatementBegin
CREATE FUNCTION providerconfigs_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Direct (not gated): low-rate, and a lost wake would leave workers on a
    -- stale config until the failsafe re-read.
    PERFORM pg_notify('providerconfig_changed', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER providerconfigs_changed AFTER INSERT OR UPDATE OR DELETE ON providerconfigs
    FOR EACH STATEMENT EXECUTE FUNCTION providerconfigs_changed();

-- ---------------------------------------------------------------------------
-- Reactor bindings: the sole wiring of "when watch_kind crosses transition,
-- run reactor". Live-editable.
CREATE TABLE reactor_bindings (
    name        text        PRIMARY KEY CHECK (name ~ '^[a-z0-9]([a-z0-9._-]{0,251}[a-z0-9])?$'),
    watch_kind  text        NOT NULL,
    transition  text        NOT NULL CHECK (transition IN ('created', 'synced', 'degraded', 'failed', 'deleted')),
    reactor     text        NOT NULL,
    label_match jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(label_match) = 'object'),
    enabled     boolean     NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    CHECK (reactor <> watch_kind)
);
-- The cascade's zero-cost short-circuit: EXISTS(enabled binding for transition).
CREATE INDEX idx_reactor_bindings_transition ON reactor_bindings (transition, watch_kind) WHERE enabled;

-- Operator verbs (subresource operations) and their outcome.
CREATE TABLE resource_operations (
    id          uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    resource_id uuid        NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    verb        text        NOT NULL,
    input       jsonb,
    output      jsonb,
    state       text        NOT NULL DEFAULT 'Pending' CHECK (state IN ('Pending', 'Running', 'Succeeded', 'Failed')),
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX idx_resource_operations_resource ON resource_operations (resource_id, created_at DESC);

-- ---------------------------------------------------------------------------
-- Work queue and outbox: UNLOGGED (the truth is resources.synced_gen vs
-- generation; after a crash the reaper rebuilds the queue), RANGE-partitioned
-- by shard_id into 16 partitions of 16 shards so claims, drains and reaper
-- passes with shard_id BETWEEN lo AND hi prune to one partition.
CREATE SEQUENCE claim_epoch_seq;

CREATE UNLOGGED TABLE work_queue (
    resource_id     uuid        NOT NULL,
    task_type       text        NOT NULL CHECK (task_type IN ('reconcile', 'delete', 'operate')),
    -- operate tasks: the resource_operations row; the nil uuid otherwise.
    op_id           uuid        NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    shard_id        int         NOT NULL,
    kind            text        NOT NULL,
    version         text        NOT NULL,
    -- the generation this task reconciles (the ON CONFLICT gen gate)
    generation      bigint      NOT NULL,
    -- what fired it: specChange, childrenSettled, resync, deleteRequested, operation
    trigger         text        NOT NULL DEFAULT 'specChange',
    provider_config jsonb,
    provider_bundle jsonb,
    attempts        int         NOT NULL DEFAULT 0,
    not_before      timestamptz NOT NULL DEFAULT now(),
    worker_id       text,
    claim_epoch     bigint,
    leased_at       timestamptz,
    heartbeat_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shard_id, resource_id, task_type, op_id)
) PARTITION BY RANGE (shard_id);
CREATE INDEX idx_work_queue_pending ON work_queue (kind, version, task_type, not_before) WHERE worker_id IS NULL;
CREATE INDEX idx_work_queue_leased ON work_queue (kind, version, heartbeat_at) WHERE worker_id IS NOT NULL;

CREATE UNLOGGED TABLE work_outbox (
    id                 bigint      GENERATED ALWAYS AS IDENTITY,
    shard_id           int         NOT NULL,
    resource_id        uuid        NOT NULL,
    task_type          text        NOT NULL,
    op_id              uuid        NOT NULL DEFAULT '00000000-0000-0000-0000-000000000000',
    claim_epoch        bigint      NOT NULL,
    generation         bigint      NOT NULL,
    -- the outcome, as the drainer applies it
    status             jsonb,
    health_ok          boolean,
    advance_synced_gen boolean     NOT NULL DEFAULT true,
    conditions         jsonb,
    error_message      text,
    error_terminal     boolean     NOT NULL DEFAULT false,
    finalizer          text,
    operation_output   jsonb,
    created_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (shard_id, id)
) PARTITION BY RANGE (shard_id);

-- lifecycle_outbox: LOGGED (a committed transition survives a crash), one row
-- per (transition edge, matching enabled binding).
CREATE TABLE lifecycle_outbox (
    resource_id  uuid        NOT NULL,
    transition   text        NOT NULL CHECK (transition IN ('created', 'synced', 'degraded', 'failed', 'deleted')),
    generation   bigint      NOT NULL,
    binding_name text        NOT NULL,
    shard_id     int         NOT NULL,
    reactor      text        NOT NULL,
    watch_kind   text        NOT NULL,
    -- the resource as it was at the transition (a deleted row is gone)
    snapshot     jsonb       NOT NULL,
    attempts     int         NOT NULL DEFAULT 0,
    worker_id    text,
    claim_epoch  bigint,
    heartbeat_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, transition, generation, binding_name, shard_id)
) PARTITION BY RANGE (shard_id);
CREATE INDEX idx_lifecycle_outbox_pending ON lifecycle_outbox (reactor, created_at) WHERE worker_id IS NULL;
CREATE INDEX idx_lifecycle_outbox_claimed ON lifecycle_outbox (heartbeat_at) WHERE worker_id IS NOT NULL;

-- +goose StatementBegin
DO $$
BEGIN
    FOR p IN 0..15 LOOP
        EXECUTE format('CREATE UNLOGGED TABLE work_queue_p%s PARTITION OF work_queue FOR VALUES FROM (%s) TO (%s)',
                       p, p * 16, (p + 1) * 16);
        EXECUTE format('CREATE UNLOGGED TABLE work_outbox_p%s PARTITION OF work_outbox FOR VALUES FROM (%s) TO (%s)',
                       p, p * 16, (p + 1) * 16);
        EXECUTE format('CREATE TABLE lifecycle_outbox_p%s PARTITION OF lifecycle_outbox FOR VALUES FROM (%s) TO (%s)',
                       p, p * 16, (p + 1) * 16);
    END LOOP;
END
$$;
-- +goose StatementEnd

-- Per-kind concurrency cap partials: one row per writer shard range, summed
-- into the global in-flight count; UNLOGGED so it resets with work_queue.
CREATE UNLOGGED TABLE kind_inflight (
    kind      text   NOT NULL,
    version   text   NOT NULL,
    range_lo  int    NOT NULL,
    in_flight bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, version, range_lo)
);

-- Roots whose last descendants settled across two concurrent drains: re-run
-- schedule_eligible for them in a fresh snapshot (drain_rollup_rechecks).
CREATE TABLE rollup_recheck (
    root_id  uuid        PRIMARY KEY,
    shard_id int         NOT NULL,
    armed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_rollup_recheck_shard ON rollup_recheck (shard_id);

-- ---------------------------------------------------------------------------
-- The running fleet: one row per process, beaten every MEMBER_HEARTBEAT_EVERY
-- with a PK upsert stamped by the DB clock. Joins and leaves (not beats) fire
-- the gated cluster_changed wake.
CREATE TABLE cluster_members (
    member_id      text        PRIMARY KEY,
    role           text        NOT NULL CHECK (role IN ('all', 'control', 'broker')),
    kinds          text[]      NOT NULL DEFAULT '{}',
    shard_lo       int,
    shard_hi       int,
    config         jsonb       NOT NULL DEFAULT '{}',
    version        text        NOT NULL DEFAULT 'dev',
    host           text        NOT NULL DEFAULT '',
    pid            int         NOT NULL DEFAULT 0,
    in_flight      int         NOT NULL DEFAULT 0,
    started_at     timestamptz NOT NULL DEFAULT now(),
    last_heartbeat timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_cluster_members_role ON cluster_members (role, last_heartbeat);

-- +goose StatementBegin
CREATE FUNCTION cluster_members_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM notify_gated('cluster_changed');
    RETURN NULL;
END
$$;
-- +goose StatementEnd

-- FOR EACH ROW, not STATEMENT: a statement-level INSERT trigger also fires for
-- an INSERT … ON CONFLICT DO UPDATE that inserted nothing (every heartbeat
-- upsert); a row-level AFTER INSERT fires only for a row actually inserted.
CREATE TRIGGER cluster_members_changed AFTER INSERT OR DELETE ON cluster_members
    FOR EACH ROW EXECUTE FUNCTION cluster_members_changed();

-- +goose Down
DROP TABLE IF EXISTS cluster_members, rollup_recheck, kind_inflight, lifecycle_outbox, work_outbox, work_queue,
    resource_operations, reactor_bindings, providerconfigs, resource_events, resource_conditions, resource_deps,
    resource_phase_deltas, resource_phase_counts, resource_labels, resources, kind_config, kind_manifest, wake_state CASCADE;
DROP SEQUENCE IF EXISTS claim_epoch_seq;
DROP FUNCTION IF EXISTS cluster_members_changed(), providerconfigs_changed(), fold_phase_count_deltas(int),
    resources_count_update(), resources_count_delete(), resources_count_insert(), resources_bump_generation(),
    resources_labels_update(), resources_labels_delete(), resources_labels_insert(),
    kind_manifest_after_delete(), kind_manifest_after_apply(), kind_manifest_finalizer(jsonb),
    kind_manifest_is_reactor(jsonb),
    validate_kind_manifest(jsonb), manifest_violation(text, text, text),
    notify_gated(text, interval, timestamptz), shard_of(uuid);
