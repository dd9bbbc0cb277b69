package pipeline

import (
	"context"
	"slices"

	"github.com/google/uuid"

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
		plo, phi := p*partitionWidth, p*partitionWidth+partitionWidth-1
		// A row another transaction updated between the statement's
		// snapshot and its lock (the reaper freeing a dead broker's
		// leases: the very moment a successor adopts them) is locked but
		// not adopted; heldRetry runs the keys not yet adopted again.
		if _, err := heldRetry(func() (locked, changed int, err error) {
			got, locked, err := s.adoptOnce(ctx, workerID, plo, phi, ks, epochOf)
			out = append(out, got...)
			ks = slices.DeleteFunc(ks, func(k TaskKey) bool { return slices.Contains(got, k) })
			return locked, len(got), err
		}); err != nil {
			return out, err
		}
	}
	return out, nil
}

// adoptOnce is one adoption statement over keys of one partition: it
// returns the keys adopted and how many rows it locked.
func (s *Store) adoptOnce(ctx context.Context, workerID string, plo, phi int, ks []TaskKey,
	epochOf map[TaskKey]int64) ([]TaskKey, int, error) {
	shards, ids, types, ops := keyArrays(ks)
	epochs := make(pgpool.Array[int64], len(ks))
	for i, k := range ks {
		epochs[i] = epochOf[k]
	}
	rows, err := s.pool.Query(ctx, `
WITH held AS MATERIALIZED (
    SELECT w.ctid
      FROM unnest($3::int[], $4::uuid[], $5::text[], $6::uuid[], $7::bigint[]) AS k(shard_id, resource_id, task_type, op_id, epoch)
     CROSS JOIN LATERAL (
         SELECT w.ctid FROM work_queue w
          WHERE w.shard_id BETWEEN $1 AND $2
            AND w.shard_id = k.shard_id AND w.resource_id = k.resource_id
            AND w.task_type = k.task_type AND w.op_id = k.op_id AND w.claim_epoch = k.epoch
            FOR UPDATE) w
), adopted AS (
    UPDATE work_queue w SET worker_id = $8, heartbeat_at = coalesce($9::timestamptz, now())
     WHERE w.shard_id BETWEEN $1 AND $2 AND w.ctid = ANY (ARRAY(SELECT ctid FROM held))
    RETURNING w.shard_id, w.resource_id, w.task_type, w.op_id
)
SELECT (SELECT count(*) FROM held), a.shard_id, a.resource_id, a.task_type, a.op_id
  FROM (SELECT) one LEFT JOIN adopted a ON true`,
		pgpool.Reserve(plo, phi, shards, ids, types, ops, epochs, workerID, s.now())...)
	if err != nil {
		return nil, 0, wrap(err, "adopt %d leases (shards %d-%d)", len(ks), plo, phi)
	}
	defer rows.Close()
	var (
		out    []TaskKey
		locked int
	)
	for rows.Next() {
		var (
			shard  *int
			id, op *uuid.UUID
			tt     *string
		)
		if err := rows.Scan(&locked, &shard, &id, &tt, &op); err != nil {
			return out, locked, wrap(err, "scan an adopted lease")
		}
		if shard != nil {
			out = append(out, TaskKey{ShardID: *shard, ResourceID: *id, TaskType: TaskType(*tt), OpID: *op})
		}
	}
	if err := rows.Err(); err != nil {
		return out, locked, wrap(err, "adopt %d leases (shards %d-%d)", len(ks), plo, phi)
	}
	return out, locked, nil
}
