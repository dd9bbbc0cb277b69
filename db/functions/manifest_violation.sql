-- manifest_violation raises the legality lattice's error: check_violation on
-- the kind_manifest_legal constraint, with the message
-- "manifest <json-pointer>: <message> [<rule>]" that core/manifest parses back.
-- Declared to return boolean so validate_kind_manifest can RETURN its call.
CREATE OR REPLACE FUNCTION manifest_violation(p_pointer text, p_message text, p_rule text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
        MESSAGE = format('manifest %s: %s [%s]', p_pointer, p_message, p_rule),
        CONSTRAINT = 'kind_manifest_legal';
END
$$;
