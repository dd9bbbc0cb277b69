-- cluster_members_changed (AFTER INSERT OR DELETE ON cluster_members, per row)
-- fires the gated cluster_changed wake on a join or a leave. Row-level on
-- purpose: a statement-level INSERT trigger also fires for every heartbeat
-- upsert that inserted nothing.
CREATE OR REPLACE FUNCTION cluster_members_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM notify_gated('cluster_changed');
    RETURN NULL;
END
$$;
