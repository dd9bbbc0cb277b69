-- reactor_bindings_changed (AFTER any write ON reactor_bindings, per
-- statement) announces on reactor_binding_changed so the API's subscription
-- hub (core/live) re-lists the bindings and pushes them to the
-- reactorBindings subscribers. Direct (not gated): bindings are written by
-- hand, rarely; one NOTIFY per statement, delivered at commit.
CREATE OR REPLACE FUNCTION reactor_bindings_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('reactor_binding_changed', '');
    RETURN NULL;
END
$$;
