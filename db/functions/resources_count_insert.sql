-- Phase counts at 1M rows: resources_count_insert, _delete and _update (AFTER
-- … FOR EACH STATEMENT, transition tables) append one delta per (kind, version, phase)
-- a statement changed to resource_phase_deltas — insert-only, so concurrent
-- drainers never contend on a counter row. fold_phase_count_deltas folds them;
-- a read is SUM(counts) + SUM(pending deltas).
-- This one: inserted rows count +1 in their phase.
CREATE OR REPLACE FUNCTION resources_count_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_phase_deltas (kind, version, phase, dn)
    SELECT kind, version, phase, count(*) FROM new_rows GROUP BY kind, version, phase;
    RETURN NULL;
END
$$;
