-- resources_announce: coalesced change announcements for the API's
-- subscription hub (core/live). One LISTEN connection per API pod receives them, re-reads
-- the announced rows in one query and fans them out to the websocket
-- subscribers whose filters match.
--
-- No per-row NOTIFY: each statement that writes resources (or
-- resource_operations) announces the ids it changed once, from an AFTER …
-- FOR EACH STATEMENT trigger reading the statement's transition tables, in
-- chunks that stay under the 8000-byte NOTIFY payload limit. A statement that
-- changes more than announce_cap() rows sends one "many" marker per kind
-- instead (the hub then tells the affected subscribers to re-query), so a bulk
-- statement never pays for thousands of notifications. NOTIFYs are delivered
-- at commit, in order, and never block the writer; a rolled back statement
-- announces nothing. An announcement is a hint, never the source of truth: the
-- hub re-reads the rows, and after a lost connection it tells subscribers to
-- re-query.
--
-- Channel resource_changed, payloads (kinds and names never contain '|', ','
-- or ':'; phase codes below):
--   u|<kind>|<id><old>,<id><old>,…   rows inserted or updated, with the phase
--                                     each had before the statement ('+' for an
--                                     inserted row), ≤ 200 ids
--   d|<kind>|<id><old>:<owner>:<name>,…  rows deleted (the row is gone, so its
--                                     identity travels in the payload), ≤ 20
--   m|<kind>                          more than announce_cap() rows of <kind>
--                                     changed in one statement ('m|' = more
--                                     than 20 kinds: any kind)
-- Channel operation_changed:
--   <id>,<id>,…                       resource_operations rows inserted or
--                                     updated, ≤ 200 ids; '*' past the cap
--
-- Phase codes: D Deleting, Q Quarantined, F Failed, O Orphaned, G Degraded,
-- R Ready, C Reconciling.

--
-- resources_announce: the statement trigger body for INSERT, UPDATE and
-- DELETE on resources (transition tables new_rows / old_rows). It runs inside
-- every writer's statement, the drainer's included, so it does one pass over
-- the transition table(s) and nothing else: no table reads, no writes.
CREATE OR REPLACE FUNCTION resources_announce() RETURNS trigger
LANGUAGE plpgsql SET enable_nestloop = off SET enable_mergejoin = off AS $$
DECLARE
    v_n       bigint;
    v_payload text;
BEGIN
    -- a count only: the distinct kinds (a sort) are needed past the cap alone
    IF TG_OP = 'DELETE' THEN
        SELECT count(*) INTO v_n FROM old_rows;
    ELSE
        SELECT count(*) INTO v_n FROM new_rows;
    END IF;
    IF v_n = 0 THEN
        RETURN NULL;
    END IF;
    IF v_n > announce_cap() THEN
        IF TG_OP = 'DELETE' THEN
            PERFORM announce_many(array_agg(DISTINCT kind)) FROM old_rows;
        ELSE
            PERFORM announce_many(array_agg(DISTINCT kind)) FROM new_rows;
        END IF;
        RETURN NULL;
    END IF;

    IF TG_OP = 'INSERT' THEN
        FOR v_payload IN
            SELECT 'u|' || kind || '|' || string_agg(item, ',')
              FROM (SELECT n.kind, n.id::text || '+' AS item,
                           (row_number() OVER (PARTITION BY n.kind) - 1) / 200 AS chunk
                      FROM new_rows n) x
             GROUP BY kind, chunk
        LOOP
            PERFORM pg_notify('resource_changed', v_payload);
        END LOOP;
    ELSIF TG_OP = 'UPDATE' THEN
        FOR v_payload IN
            SELECT 'u|' || kind || '|' || string_agg(item, ',')
              -- old phase per id by a hash join: the plan is cached from
              -- the first call's transition-table sizes, so the function's
              -- SET clauses rule out the nested loop (quadratic in the
              -- drain's batch size) and the sorts of a merge join.
              FROM (SELECT n.kind, n.id::text || announce_phase_code(o.phase) AS item,
                           (row_number() OVER (PARTITION BY n.kind) - 1) / 200 AS chunk
                      FROM new_rows n JOIN old_rows o ON o.id = n.id) x
             GROUP BY kind, chunk
        LOOP
            PERFORM pg_notify('resource_changed', v_payload);
        END LOOP;
    ELSE
        FOR v_payload IN
            SELECT 'd|' || kind || '|' || string_agg(item, ',')
              FROM (SELECT o.kind,
                           o.id::text || announce_phase_code(o.phase) || ':' || coalesce(o.owner_id::text, '')
                               || ':' || o.name AS item,
                           (row_number() OVER (PARTITION BY o.kind) - 1) / 20 AS chunk
                      FROM old_rows o) x
             GROUP BY kind, chunk
        LOOP
            PERFORM pg_notify('resource_changed', v_payload);
        END LOOP;
    END IF;
    RETURN NULL;
END
$$;
