-- lifecycle_selected: whether binding p_binding still selects a
-- lifecycle_outbox row written for reactor p_reactor, watched kind
-- p_watch_kind, transition p_transition and resource snapshot p_snapshot:
-- the binding exists, is enabled, names that reactor, kind and transition,
-- and its label selector matches the snapshot's labels. A row it no longer
-- selects (the binding deleted, disabled, or re-pointed after the row was
-- written) is never delivered, and so never re-armed: a claim that lapses
-- (reap_stale_lifecycle), dies with its member (free_dead_member_leases) or
-- is given back (lifecycle.Store.Release) drops it, as the re-point dropped
-- the pending ones, rather than leave it pending under the reactor the
-- binding left, where no dispatcher may ever claim it again. One primary-key
-- probe of reactor_bindings; an inlinable SQL expression.
CREATE OR REPLACE FUNCTION lifecycle_selected(p_binding text, p_reactor text, p_watch_kind text, p_transition text,
                                              p_snapshot jsonb)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM reactor_bindings b
                    WHERE b.name = p_binding AND b.enabled AND b.reactor = p_reactor
                      AND b.watch_kind = p_watch_kind AND b.transition = p_transition
                      AND coalesce(p_snapshot->'labels', '{}') @> b.label_match)
$$;
