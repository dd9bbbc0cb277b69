-- 00006_platform: what a platform team that owns its kinds needs.
--
-- * kind_config.max_transient_attempts: the poison-pill bound. A reconcile
--   failing transiently that many times in a row for one generation is
--   dead-lettered by the drain (terminal: it stops re-queueing until a spec
--   edit). Seeded from the manifest like the other policy columns, editable
--   live; 0 = never dead-letter.
-- * the phase counts gain the kind version (resource_phase_counts and
--   resource_phase_deltas), so the Kinds page shows each version's resources
--   without counting the table. The totals are rebuilt once here, under a
--   SHARE lock on resources (writers wait, readers do not), so no delta is
--   counted twice or lost.

-- +goose Up
ALTER TABLE kind_config ADD COLUMN max_transient_attempts integer NOT NULL DEFAULT 20
    CONSTRAINT kind_config_max_transient_attempts_check CHECK (max_transient_attempts >= 0);

LOCK TABLE resources IN SHARE MODE;
ALTER TABLE resource_phase_deltas ADD COLUMN version text NOT NULL DEFAULT '';
ALTER TABLE resource_phase_counts ADD COLUMN version text NOT NULL DEFAULT '';
DELETE FROM resource_phase_deltas;
DELETE FROM resource_phase_counts;
ALTER TABLE resource_phase_counts DROP CONSTRAINT resource_phase_counts_pkey;
ALTER TABLE resource_phase_counts ADD PRIMARY KEY (kind, version, phase);
INSERT INTO resource_phase_counts (kind, version, phase, n)
SELECT kind, version, phase, count(*) FROM resources GROUP BY kind, version, phase;

-- +goose Down
LOCK TABLE resources IN SHARE MODE;
DELETE FROM resource_phase_deltas;
DELETE FROM resource_phase_counts;
ALTER TABLE resource_phase_counts DROP CONSTRAINT resource_phase_counts_pkey;
ALTER TABLE resource_phase_counts DROP COLUMN version;
ALTER TABLE resource_phase_counts ADD PRIMARY KEY (kind, phase);
INSERT INTO resource_phase_counts (kind, phase, n)
SELECT kind, phase, count(*) FROM resources GROUP BY kind, phase;
ALTER TABLE resource_phase_deltas DROP COLUMN version;
ALTER TABLE kind_config DROP COLUMN max_transient_attempts;
