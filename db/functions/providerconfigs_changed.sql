-- providerconfigs_changed (AFTER any write ON providerconfigs, per statement)
-- announces on providerconfig_changed so brokers re-read and push configs.
CREATE OR REPLACE FUNCTION providerconfigs_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    -- Direct (not gated): low-rate, and a lost wake would leave workers on a
    -- stale config until the failsafe re-read.
    PERFORM pg_notify('providerconfig_changed', '');
    RETURN NULL;
END
$$;
