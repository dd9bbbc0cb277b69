-- assign_member_shards: dynamic sharding, no leader. Ranks p_member_id among
-- the LIVE members of its own role (live_cluster_members: heartbeat newer
-- than p_liveness_secs and, for a member that holds one, its liveness lock
-- still granted; ordered by member_id in "C" collation) and cuts
-- [0, p_total) into count contiguous slices: rank r of n owns
-- [r*total/n, (r+1)*total/n). The slices tile [0, p_total) disjointly; roles
-- tile independently. Returns one int4range (one BETWEEN lo AND hi-1 → one or
-- two partitions).
-- A member that is not live (unknown, its heartbeat lapsed, or its lock
-- released) gets 'empty', never NULL: "owns nothing" is a value every caller
-- handles the same way (isempty), and it is also what a member gets when
-- there are more live members than shards.
CREATE OR REPLACE FUNCTION assign_member_shards(p_member_id text, p_total int DEFAULT 256, p_liveness_secs int DEFAULT 30,
                                     p_now timestamptz DEFAULT now())
RETURNS int4range LANGUAGE sql STABLE AS $$
    WITH alive AS MATERIALIZED (
        SELECT a.member_id, a.role FROM live_cluster_members(p_liveness_secs, p_now) a
    ), me AS (
        SELECT role FROM alive WHERE member_id = p_member_id
    ), live AS (
        SELECT m.member_id,
               row_number() OVER (ORDER BY m.member_id COLLATE "C") - 1 AS rank,
               count(*) OVER () AS n
          FROM alive m, me
         WHERE m.role = me.role
    )
    SELECT coalesce(
        (SELECT int4range((rank * p_total / n)::int, ((rank + 1) * p_total / n)::int)
           FROM live WHERE member_id = p_member_id),
        'empty'::int4range)
$$;
