-- shard_of: the one sharding key, uuid_hash(id) & 255. 256 logical shards;
-- work_queue, work_outbox and lifecycle_outbox are RANGE-partitioned into 16
-- partitions of 16 shards. A partition key cannot be GENERATED, so writers
-- store shard_of(id) in a plain shard_id column, and every pass filters
-- shard_id BETWEEN lo AND hi so the planner prunes to the partitions of a range.
CREATE OR REPLACE FUNCTION shard_of(p_id uuid) RETURNS int
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT uuid_hash(p_id) & 255
$$;
