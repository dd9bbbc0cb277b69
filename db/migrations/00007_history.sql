-- 00005_history: every applied generation's spec and labels, for
-- Resource.specHistory, the detail panel's diff, `conctl history` and
-- rollbackResource. One row per (resource, generation): an apply that only
-- changes labels rewrites its generation's row. Bounded per resource by the
-- kind's kind_config.history_limit (record_spec_history prunes the oldest);
-- 0 keeps none. The rows go with their resource (ON DELETE CASCADE).
-- Composed children and value-flow rewrites are not applies: they are not
-- recorded (their spec is their parent's, or their upstream's, to restore).

-- +goose Up
CREATE TABLE resource_spec_history (
    resource_id         uuid        NOT NULL REFERENCES resources (id) ON DELETE CASCADE,
    generation          bigint      NOT NULL,
    spec                jsonb       NOT NULL,
    labels              jsonb       NOT NULL DEFAULT '{}',
    provider_config_ref text,
    -- Created, SpecUpdated, LabelsUpdated or RolledBack
    reason              text        NOT NULL,
    actor               text        NOT NULL DEFAULT 'system',
    -- the generation a rollback copied (null otherwise)
    rolled_back_from    bigint,
    created_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (resource_id, generation)
);

ALTER TABLE kind_config ADD COLUMN history_limit int NOT NULL DEFAULT 20
    CHECK (history_limit BETWEEN 0 AND 1000);

-- +goose Down
ALTER TABLE kind_config DROP COLUMN IF EXISTS history_limit;
DROP TABLE IF EXISTS resource_spec_history;
