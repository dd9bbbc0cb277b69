-- +goose Up
-- Writers wait from here to the end: a resource written between the copy
-- below and the triggers that keep resource_phases in step would have no
-- phase row (readers go on until the index drops below).
LOCK TABLE resources IN SHARE ROW EXCLUSIVE MODE;

-- The phase index: a narrow copy of the columns that list pages, the rollup
-- gate and the reaper's catch-up walk key on, one row per resource, kept in
-- step with resources by the statement triggers below in the same
-- transaction. resources keeps every column users read (phase, is_ready,
-- the scalars) and loses every index whose key or predicate a status write
-- changes (phase, synced_gen, updated_at), so the drainer's status write —
-- status, synced_gen, health_ok, updated_at — is a heap-only (HOT) update of
-- the wide row: no entry in its primary key, (kind, name) or label indexes,
-- and a WAL record of the changed bytes only. The index entries a settle
-- must move (the row left Reconciling) move here, on a row of ~100 bytes.
-- docs/architecture.md ("The physical layout of resources") has the
-- measurements behind it.
CREATE TABLE resource_phases (
    id         uuid        PRIMARY KEY,
    kind       text        NOT NULL,
    owner_id   uuid,
    root_id    uuid,
    shard_id   int         NOT NULL,
    created_at timestamptz NOT NULL,
    phase      text        NOT NULL,
    -- since: when the row entered its phase, or when the reaper last
    -- re-pended it; the reaper's catch-up walk goes oldest first, so a row it
    -- just retried goes to the back of the line.
    since      timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 90, autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

INSERT INTO resource_phases (id, kind, owner_id, root_id, shard_id, created_at, phase, since)
SELECT id, kind, owner_id, root_id, shard_id, created_at, phase, updated_at FROM resources;

-- List pages, as before on resources (see the baseline's comment on the
-- "C" collation of the unfiltered page index).
CREATE INDEX idx_resource_phases_page       ON resource_phases ((phase COLLATE "C"), created_at DESC, id DESC);
CREATE INDEX idx_resource_phases_kind_page  ON resource_phases (kind, phase, created_at DESC, id DESC);
CREATE INDEX idx_resource_phases_owner_page ON resource_phases (owner_id, phase, created_at DESC, id DESC)
    WHERE owner_id IS NOT NULL;
-- Live descendants of a root still progressing: the rollup gate's probe.
-- Reconciling is exactly "not synced, not failed for its spec, not frozen,
-- not deleting" (the phase precedence), the baseline's unsettled predicate.
CREATE INDEX idx_resource_phases_unsettled ON resource_phases (root_id)
    WHERE phase = 'Reconciling' AND root_id IS NOT NULL;
-- The reaper's catch-up walk: rows still to reconcile or retry, per shard,
-- oldest first.
CREATE INDEX idx_resource_phases_lagging ON resource_phases (shard_id, since)
    WHERE phase IN ('Reconciling', 'Failed');

-- idx_resources_failed goes too: nothing reads it (failed rows are listed
-- through the phase index), and its predicate (failure_gen = generation)
-- names generation, so every spec write — a value flow substituting an
-- upstream's output, an apply — could not be heap-only while it existed.
DROP INDEX idx_resources_phase_page, idx_resources_kind_phase_page, idx_resources_owner_phase_page,
    idx_resources_unsettled, idx_resources_lagging, idx_resources_failed;
-- owner_id lookups on resources itself: the owner FK's cascade, the
-- deletion sweep's "has children" probe and the subtree walks. owner_id never
-- changes on a status write, so this index does not cost HOT.
CREATE INDEX idx_resources_owner ON resources (owner_id) WHERE owner_id IS NOT NULL;

-- Room on each page for a new version of every row on it, so a status write
-- stays on its page (HOT needs it): leaves composed together share pages and
-- their results drain together, in one transaction, so no old version is
-- pruned before the batch ends. Measured on a 400-leaf batch
-- (TestDrain_StatusWriteIsHeapOnly): fillfactor 80 → 28% heap-only, 70 → 35%,
-- 60 → 60%, 50 → 93%; the heap is twice the size at 50, which costs disk and
-- cache, not writes. Autovacuum at 2% dead rows instead of 20%, so that room
-- comes back on a table a drain rewrites row by row.
ALTER TABLE resources SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02);

-- The triggers' names start with an underscore: Postgres fires the triggers
-- of one event in name order, and these must run before the cascade
-- (cascade_on_ready_change, propagate_dependency_failure, …) reads the gates.
CREATE TRIGGER _resource_phases_insert AFTER INSERT ON resources
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION resource_phases_insert();
CREATE TRIGGER _resource_phases_update AFTER UPDATE ON resources
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION resource_phases_update();
CREATE TRIGGER _resource_phases_delete AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION resource_phases_delete();
CREATE TRIGGER _resource_phases_truncate AFTER TRUNCATE ON resources
    FOR EACH STATEMENT EXECUTE FUNCTION resource_phases_truncate();

-- +goose Down
DROP TRIGGER IF EXISTS _resource_phases_insert ON resources;
DROP TRIGGER IF EXISTS _resource_phases_update ON resources;
DROP TRIGGER IF EXISTS _resource_phases_delete ON resources;
DROP TRIGGER IF EXISTS _resource_phases_truncate ON resources;
DROP TABLE IF EXISTS resource_phases;
DROP INDEX IF EXISTS idx_resources_owner;
ALTER TABLE resources RESET (fillfactor, autovacuum_vacuum_scale_factor, autovacuum_analyze_scale_factor);
CREATE INDEX idx_resources_phase_page      ON resources ((phase COLLATE "C"), created_at DESC, id DESC);
CREATE INDEX idx_resources_kind_phase_page ON resources (kind, phase, created_at DESC, id DESC);
CREATE INDEX idx_resources_owner_phase_page ON resources (owner_id, phase, created_at DESC, id DESC)
    WHERE owner_id IS NOT NULL;
CREATE INDEX idx_resources_unsettled ON resources (root_id)
    WHERE root_id IS NOT NULL AND synced_gen < generation AND failure_gen <> generation
      AND frozen_until IS NULL AND deletion_requested_at IS NULL;
CREATE INDEX idx_resources_lagging ON resources (shard_id, updated_at) WHERE synced_gen < generation;
CREATE INDEX idx_resources_failed ON resources (shard_id) WHERE failure_gen = generation;
