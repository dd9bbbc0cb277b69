-- resources_count_update: an updated row moves -1 from its old (version,
-- phase) and +1 to its new one (a live version migration moves it between
-- versions); only (kind, version, phase) triples whose net delta is non-zero
-- are written,
-- so the drainer's status writes that keep the phase append nothing (see
-- resources_count_insert for the delta log).
CREATE OR REPLACE FUNCTION resources_count_update() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO resource_phase_deltas (kind, version, phase, dn)
    SELECT kind, version, phase, sum(dn) FROM (
        SELECT o.kind, o.version, o.phase, -1 AS dn FROM old_rows o
        UNION ALL
        SELECT n.kind, n.version, n.phase, 1 FROM new_rows n
    ) d
    GROUP BY kind, version, phase
    HAVING sum(dn) <> 0;
    RETURN NULL;
END
$$;
