-- 00009_lease_keys: the cluster's lease-secret keys. Every broker MACs the
-- per-dispatch lease secrets it hands workers with the newest key here, and
-- verifies a completion (or a redelivery of one to another broker after a
-- partition or a restart) against the few newest, so any member can check a
-- secret any member issued, also on an open worker plane without mesh
-- tokens. The first broker to start creates the key; a broker that finds the
-- newest older than its rotation period adds a fresh one (serialized by an
-- advisory lock); keys beyond the newest three are deleted. The keys are as
-- secret as the database itself.

-- +goose Up
CREATE TABLE lease_keys (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key        bytea       NOT NULL CONSTRAINT lease_keys_key_check CHECK (length(key) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE lease_keys;
