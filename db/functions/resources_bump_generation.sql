-- resources_bump_generation (BEFORE UPDATE OF spec, per row, only when spec
-- changed): generation bumps on a spec change and only then. The trigger's
-- column list and WHEN clause keep the drainer's status writes from running it.
CREATE OR REPLACE FUNCTION resources_bump_generation() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.generation := OLD.generation + 1;
    RETURN NEW;
END
$$;
