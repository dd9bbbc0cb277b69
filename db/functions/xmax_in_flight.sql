-- xmax_in_flight: could the transaction stamped in a row version's xmax be
-- invisible to the current snapshot — still running, or committed after the
-- snapshot was taken? That is the "another drain is settling this row right
-- now" signal the rollup straddle probe needs. It reads the header, takes no
-- lock and writes nothing.
--   * 0 (never updated or locked) and the frozen xids → false.
--   * our own transaction (we hold the lock) → false.
--   * an xid at or past the snapshot's xmax, or in its in-progress list → true.
--   * an xid that completed before the snapshot (a stale row lock, an aborted
--     updater) → false.
-- A MultiXactId in xmax (several lockers) is read as a plain xid and may be
-- misjudged either way; rollup_gate covers that with its small remainder rule.
CREATE OR REPLACE FUNCTION xmax_in_flight(p_xmax xid) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    v_raw  bigint := p_xmax::text::bigint;
    v_snap pg_snapshot;
    v_top  bigint;
    v_diff bigint;
    v_full bigint;
BEGIN
    IF v_raw < 3 THEN
        RETURN false;
    END IF;
    v_snap := pg_current_snapshot();
    v_top := pg_snapshot_xmax(v_snap)::text::bigint;
    -- Widen the 32-bit xid to the 64-bit one nearest the snapshot's xmax.
    v_diff := v_raw - (v_top & 4294967295);
    IF v_diff >= 2147483648 THEN
        v_diff := v_diff - 4294967296;
    ELSIF v_diff < -2147483648 THEN
        v_diff := v_diff + 4294967296;
    END IF;
    v_full := v_top + v_diff;
    IF v_full = coalesce(pg_current_xact_id_if_assigned()::text::bigint, -1) THEN
        RETURN false;
    END IF;
    IF v_diff >= 0 THEN
        RETURN true;
    END IF;
    RETURN NOT pg_visible_in_snapshot(v_full::text::xid8, v_snap);
END
$$;
