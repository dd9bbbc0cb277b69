-- 00005_drop_labels_gin: drop the GIN index on resources.labels. Nothing
-- reads through it since resource_labels carries the label path: a
-- label-filtered page walks resource_labels' primary key and checks the
-- rest of the filter on each resource fetched by primary key (core/store
-- list.go), and the reactor bindings match labels on transition-table rows.
-- It cost an index insert per composed child and per non-HOT update, space
-- (about 40 kB per 1,000 resources) and a plan trap: a small GIN estimate
-- once tempted the planner into a bitmap scan of every resource with the
-- label (idx_scan stayed 0 through a 100k-leaf benchmark).

-- +goose Up
DROP INDEX IF EXISTS idx_resources_labels;

-- +goose Down
CREATE INDEX IF NOT EXISTS idx_resources_labels ON resources USING gin (labels jsonb_path_ops);
