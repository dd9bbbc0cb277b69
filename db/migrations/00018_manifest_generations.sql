-- 00018_manifest_generations: a kind version deleted and applied again
-- continues its manifest_gen instead of starting over at 1.
--
-- The store's caches of decoded manifests and compiled schemas (per
-- process) key an entry by (kind, version) and its manifest_gen: a lookup
-- at another generation is a miss. A version deleted and applied again
-- started again at 1, so a process that had cached the old document at that
-- generation validated specs against the deleted schema — until the new
-- one's generation moved past the old one's. The last generation of each
-- deleted version is kept here, and an apply that creates the version again
-- starts after it. A version deleted before this migration has no row: its
-- next life may still meet a process that cached it before the upgrade.

-- +goose Up
CREATE TABLE kind_manifest_generations (
    kind     text   NOT NULL,
    version  text   NOT NULL,
    last_gen bigint NOT NULL,
    PRIMARY KEY (kind, version)
);

-- +goose Down
DROP TABLE kind_manifest_generations;
