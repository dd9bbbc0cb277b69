package pipeline

import (
	"context"

	"github.com/converge-run/converge/db/pgpool"
)

// Held is a task lease as a worker reports it: the task and the claim_epoch
// it was dispatched under.
type Held struct {
	Key   TaskKey
	Epoch int64
}

// Adopt moves to workerID the leases of the given tasks that are still held
// under the given claim_epoch, by any claimer (or none), and stamps their
// heartbeat: a broker takes over the tasks a worker reports still running
// from a session with another broker (Subscribe.resumed), so their leases
// are heartbeated by the broker the result will arrive at, and are not freed
// with a dead broker's. The epoch is unchanged, so the result is applied as
// the claim's one result whichever broker delivers it. A task whose row was
// released, reaped or claimed again (a different epoch) is not adopted. One
// statement per partition, rows locked in key order (see byPartition).
// It returns the keys adopted.
func (s *Store) Adopt(ctx context.Context, workerID string, tasks []Held) ([]TaskKey, error) {
	epochOf := make(map[TaskKey]int64, len(tasks))
	keys := make([]TaskKey, 0, len(tasks))
	for _, t := range tasks {
		epochOf[t.Key] = t.Epoch
		keys = append(keys, t.Key)
	}
	var out []TaskKey
	for p, ks := range byPartition(0, 255, keys) {
		shards, ids, types, ops := keyArrays(ks)
		epochs := make(pgpool.Array[int64], len(ks))
		for i, k := range ks {
			epochs[i] = epochOf[k]
		}
		rows, err := s.pool.Query(ctx, `
WITH held AS (
    SELECT w.ctid
      FROM unnest($3::int[], $4::uuid[], $5::text[], $6::uuid[], $7::bigint[]) AS k(shard_id, resource_id, task_type, op_id, epoch)
     CROSS JOIN LATERAL (
         SELECT w.ctid FROM work_queue w
          WHERE w.shard_id BETWEEN $1 AND $2
            AND w.shard_id = k.shard_id AND w.resource_id = k.resource_id
            AND w.task_type = k.task_type AND w.op_id = k.op_id AND w.claim_epoch = k.epoch
            FOR UPDATE) w
)
UPDATE work_queue w SET worker_id = $8, heartbeat_at = coalesce($9::timestamptz, now())
 WHERE w.shard_id BETWEEN $1 AND $2 AND w.ctid = ANY (ARRAY(SELECT ctid FROM held))
RETURNING w.shard_id, w.resource_id, w.task_type, w.op_id`,
			pgpool.Reserve(p*partitionWidth, p*partitionWidth+partitionWidth-1, shards, ids, types, ops, epochs, workerID, s.now())...)
		if err != nil {
			return out, wrap(err, "adopt %d leases (shards %d-%d)", len(ks), p*partitionWidth, p*partitionWidth+partitionWidth-1)
		}
		for rows.Next() {
			var k TaskKey
			var tt string
			if err := rows.Scan(&k.ShardID, &k.ResourceID, &tt, &k.OpID); err != nil {
				rows.Close()
				return out, wrap(err, "scan an adopted lease")
			}
			k.TaskType = TaskType(tt)
			out = append(out, k)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return out, wrap(err, "adopt %d leases (shards %d-%d)", len(ks), p*partitionWidth, p*partitionWidth+partitionWidth-1)
		}
	}
	return out, nil
}
