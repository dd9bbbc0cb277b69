-- notify_gated: the wake gate. A coalesced pg_notify(channel), at most about
-- one per window (50 ms) per channel across all backends, without blocking any
-- caller:
--   layer 1: an unlocked read of wake_state: inside the window → return;
--   layer 2: pg_try_advisory_xact_lock picks one winner, losers return at once;
--   layer 3: the winner stamps wake_state and emits the one pg_notify.
-- A wake is a latency hint, never the source of truth: listeners also poll.
-- Returns whether this call emitted the wake.
CREATE OR REPLACE FUNCTION notify_gated(p_channel text,
                             p_window interval DEFAULT interval '50 milliseconds',
                             p_now timestamptz DEFAULT clock_timestamp())
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_last timestamptz;
BEGIN
    SELECT last_notified_at INTO v_last FROM wake_state WHERE channel = p_channel;
    IF v_last IS NOT NULL AND v_last > p_now - p_window THEN
        RETURN false;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('notify_gated'), hashtext(p_channel)) THEN
        RETURN false;
    END IF;
    INSERT INTO wake_state AS w (channel, last_notified_at) VALUES (p_channel, p_now)
    ON CONFLICT (channel) DO UPDATE SET last_notified_at = EXCLUDED.last_notified_at
        WHERE w.last_notified_at <= p_now - p_window;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify(p_channel, '');
    RETURN true;
END
$$;
