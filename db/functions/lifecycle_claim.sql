-- lifecycle_claim: a reactor dispatcher's claim. Takes up to p_limit
-- pending deliveries (worker_id NULL) of the reactors p_reactors in shards
-- [p_lo, p_hi], oldest first across the reactors: one ordered probe of the
-- pending index (reactor, created_at) a reactor, FOR UPDATE SKIP LOCKED,
-- its rows merged by age. A row its binding no longer selects — the binding
-- disabled or removed since the row was written, or re-pointed at another
-- reactor, watched kind, transition or label selector the row's snapshot
-- does not match — is deleted and returned with kept false (nothing to
-- deliver: the old subscription's backlog never reaches a reactor the
-- binding no longer names, nor waits forever for one no worker serves);
-- the others are stamped (worker, a fresh claim_epoch each, the
-- heartbeat, one more attempt) and returned with kept true.
--
-- Why a function: it must read its batch, not the backlog, whatever the
-- outbox's statistics say. With them taken while the outbox was drained
-- (analyzed with only dead rows on its pages, it looks empty however much
-- it holds), the claim, then a statement converge sent, walked every
-- partition's primary key in the range and sorted it (59,520 buffers to
-- claim 50 of 40,000). Here the probes run with seq scans,
-- bitmap scans and sorts off, which leaves the ordered probe a reactor the
-- one plan without a disabled node beyond the merge's sort that every plan
-- has; and each partition's rows are deleted or stamped by TID alone in
-- that partition (their tableoid), which no index of it can answer
-- (TestPlans_ClaimReadsItsBatchNotTheBacklog, "emptied"), all partitions in
-- one statement. Planned for each call with its arguments.
CREATE OR REPLACE FUNCTION lifecycle_claim(p_worker text, p_lo int, p_hi int, p_reactors text[], p_limit int)
RETURNS TABLE (kept boolean, resource_id uuid, transition text, generation bigint, binding_name text, shard_id int,
               reactor text, watch_kind text, claim_epoch bigint, attempts int, snapshot jsonb, created_at timestamptz)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_custom_plan SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_sort = off SET jit = off AS $fn$
#variable_conflict use_column
DECLARE
    v_parts regclass[];
    v_live  text[];
    v_dead  text[];
    v_ctes  text[] := '{}';
    v_sel   text[] := '{}';
BEGIN
    WITH picked AS (
        SELECT c.tableoid, c.ctid,
               EXISTS (SELECT 1 FROM reactor_bindings b
                        WHERE b.name = c.binding_name AND b.enabled AND b.reactor = r.reactor
                          AND b.watch_kind = c.watch_kind AND b.transition = c.transition
                          AND coalesce(c.snapshot->'labels', '{}') @> b.label_match) AS live
          FROM unnest(p_reactors) AS r(reactor)
         CROSS JOIN LATERAL (
            SELECT l.tableoid, l.ctid, l.binding_name, l.watch_kind, l.transition, l.snapshot, l.created_at
              FROM lifecycle_outbox l
             WHERE l.reactor = r.reactor AND l.worker_id IS NULL AND l.shard_id BETWEEN p_lo AND p_hi
             ORDER BY l.created_at
             LIMIT p_limit
               FOR UPDATE OF l SKIP LOCKED) c
         ORDER BY c.created_at
         LIMIT p_limit
    ), per AS (
        SELECT p.tableoid::regclass AS part,
               array_agg(p.ctid) FILTER (WHERE p.live) AS live, array_agg(p.ctid) FILTER (WHERE NOT p.live) AS dead
          FROM picked p
         GROUP BY p.tableoid
    )
    SELECT array_agg(x.part), array_agg(x.live::text), array_agg(x.dead::text) INTO v_parts, v_live, v_dead FROM per x;
    IF v_parts IS NULL THEN
        RETURN;
    END IF;
    -- One statement for every partition the batch touches (a claim across
    -- a broker's range touches up to sixteen): each partition's rows by TID
    -- in a statement of their own would be sixteen parses and plans a claim.
    FOR i IN 1 .. cardinality(v_parts) LOOP
        IF v_dead[i] IS NOT NULL THEN
            v_ctes := v_ctes || format($sql$d%s AS (
                DELETE FROM %s l WHERE l.ctid = ANY (%L::tid[])
                RETURNING false AS kept, l.resource_id, l.transition, l.generation, l.binding_name, l.shard_id, l.reactor,
                          l.watch_kind, 0::bigint AS claim_epoch, l.attempts, NULL::jsonb AS snapshot, l.created_at)$sql$,
                i, v_parts[i], v_dead[i]);
            v_sel := v_sel || format('SELECT * FROM d%s', i);
        END IF;
        IF v_live[i] IS NOT NULL THEN
            v_ctes := v_ctes || format($sql$c%s AS (
                UPDATE %s l
                   SET worker_id = $1, claim_epoch = nextval('claim_epoch_seq'), heartbeat_at = now(), attempts = l.attempts + 1
                 WHERE l.ctid = ANY (%L::tid[])
                RETURNING true AS kept, l.resource_id, l.transition, l.generation, l.binding_name, l.shard_id, l.reactor,
                          l.watch_kind, l.claim_epoch, l.attempts, l.snapshot, l.created_at)$sql$,
                i, v_parts[i], v_live[i]);
            v_sel := v_sel || format('SELECT * FROM c%s', i);
        END IF;
    END LOOP;
    RETURN QUERY EXECUTE 'WITH ' || array_to_string(v_ctes, ', ') || ' ' || array_to_string(v_sel, ' UNION ALL ')
        USING p_worker;
END
$fn$;
