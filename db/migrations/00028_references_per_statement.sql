-- 00028_references_per_statement: the references to resources that the hot
-- path writes — a resource's owner, an edge's two ends — are checked once
-- per statement instead of once per row, and their delete cascade runs once
-- per statement.
--
-- The three foreign keys (resources.owner_id, resource_deps.dependent_id and
-- .dependency_id) checked each inserted row with a query of its own: a
-- compose's 1,000 children probed and locked their one owner 1,000 times,
-- and its edges both ends of each. That was 2.5 checks and 13.5 buffers a
-- leaf, and about 6% of the database's CPU in a 100k run
-- (docs/architecture.md, "References checked per statement"). Triggers do
-- the same work per statement: each distinct referenced resource is probed
-- and locked FOR KEY SHARE once (resources_owner_check on insert,
-- resources_owner_recheck when a child is re-adopted, resource_deps_check
-- on insert and update), and a delete removes owned children and edges
-- (resources_cascade_delete; resource_deps_truncate with a TRUNCATE). The
-- errors are the foreign keys' own: SQLSTATE 23503, the same constraint
-- names. The names start with "_fk_" so they fire before the other
-- statement triggers, as the foreign keys' triggers did. The other tables'
-- foreign keys to resources (events, conditions, operations, spec history,
-- providerconfigs) are written off the hot path and stay.

-- +goose Up
ALTER TABLE resources DROP CONSTRAINT resources_owner_id_fkey;
ALTER TABLE resource_deps DROP CONSTRAINT resource_deps_dependent_id_fkey;
ALTER TABLE resource_deps DROP CONSTRAINT resource_deps_dependency_id_fkey;

CREATE TRIGGER _fk_resources_owner_insert AFTER INSERT ON resources
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION resources_owner_check();
CREATE TRIGGER _fk_resources_owner_update AFTER UPDATE OF owner_id ON resources
    FOR EACH ROW WHEN (NEW.owner_id IS NOT NULL AND NEW.owner_id IS DISTINCT FROM OLD.owner_id)
    EXECUTE FUNCTION resources_owner_recheck();
CREATE TRIGGER _fk_resources_id BEFORE UPDATE OF id ON resources
    FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id) EXECUTE FUNCTION resources_id_fixed();
CREATE TRIGGER _fk_resources_cascade AFTER DELETE ON resources
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION resources_cascade_delete();
CREATE TRIGGER _fk_resources_truncate AFTER TRUNCATE ON resources
    FOR EACH STATEMENT EXECUTE FUNCTION resource_deps_truncate();
CREATE TRIGGER _fk_resource_deps_insert AFTER INSERT ON resource_deps
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION resource_deps_check();
CREATE TRIGGER _fk_resource_deps_update AFTER UPDATE ON resource_deps
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION resource_deps_check();

-- +goose Down
DROP TRIGGER IF EXISTS _fk_resources_owner_insert ON resources;
DROP TRIGGER IF EXISTS _fk_resources_owner_update ON resources;
DROP TRIGGER IF EXISTS _fk_resources_id ON resources;
DROP TRIGGER IF EXISTS _fk_resources_cascade ON resources;
DROP TRIGGER IF EXISTS _fk_resources_truncate ON resources;
DROP TRIGGER IF EXISTS _fk_resource_deps_insert ON resource_deps;
DROP TRIGGER IF EXISTS _fk_resource_deps_update ON resource_deps;
ALTER TABLE resources ADD CONSTRAINT resources_owner_id_fkey
    FOREIGN KEY (owner_id) REFERENCES resources (id) ON DELETE CASCADE;
ALTER TABLE resource_deps ADD CONSTRAINT resource_deps_dependent_id_fkey
    FOREIGN KEY (dependent_id) REFERENCES resources (id) ON DELETE CASCADE;
ALTER TABLE resource_deps ADD CONSTRAINT resource_deps_dependency_id_fkey
    FOREIGN KEY (dependency_id) REFERENCES resources (id) ON DELETE CASCADE;
