-- 00027_drop_zero_arg_reap: the dead-member probe's function without its
-- own-lock argument goes.
--
-- Function set 86 gave reap_unlocked_cluster_members the caller's own lock
-- key (reap_unlocked_cluster_members(p_self_key int)): a probe whose own
-- lock is gone removes no one. CREATE OR REPLACE cannot change a signature,
-- so a database upgraded from an earlier set kept the zero-argument
-- function beside the new one, with the body that removed every member
-- whose lock was missing, its caller's too. No caller of this release uses
-- it; a pod of a release before set 86 still running during a rolling
-- update finds it gone, and its probe logs one warning and retries until
-- the pod is replaced (its peers' probes remove dead members meanwhile).
-- IF EXISTS: a database created with set 86 or later never had it.

-- +goose Up
DROP FUNCTION IF EXISTS reap_unlocked_cluster_members();

-- +goose Down
-- Nothing to restore: the function's body lives in no migration, and every
-- binary that runs over the schema down to 00026 has set 86 or later,
-- which calls the one-argument function.
