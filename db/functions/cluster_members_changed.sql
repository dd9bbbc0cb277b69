-- cluster_members_changed (AFTER INSERT OR DELETE ON cluster_members, per row)
-- wakes cluster_changed on a join or a leave, every time: joins come in
-- bursts (members re-registering together after a database outage, a
-- rollout), and a peer that re-tiled on the first wake of a burst must hear
-- the later ones, or it keeps a view without them — shards nobody claims —
-- until its next poll. Membership changes are rare, so the wakes are not
-- gated (Postgres folds duplicates within one transaction). Row-level on
-- purpose: a statement-level INSERT trigger also fires for every heartbeat
-- upsert that inserted nothing.
CREATE OR REPLACE FUNCTION cluster_members_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('cluster_changed', '');
    RETURN NULL;
END
$$;
