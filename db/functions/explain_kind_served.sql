-- explain_kind_served: whether a live broker reports a ready worker for the
-- kind version (explain_task's no_worker gate): a live member
-- (live_cluster_members, the fleet's liveness window p_liveness_secs) of a
-- broker role whose kinds array — the "kind/version" pairs its connected
-- ready workers serve — holds it.
CREATE OR REPLACE FUNCTION explain_kind_served(p_kind text, p_version text, p_now timestamptz, p_liveness_secs int)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM live_cluster_members(p_liveness_secs, p_now) l
                     JOIN cluster_members m ON m.member_id = l.member_id
                    WHERE l.role IN ('all', 'broker') AND (p_kind || '/' || p_version) = ANY (m.kinds))
$$;
