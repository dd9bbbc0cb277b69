package pipeline

import (
	"context"

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
	// One row per key: a list naming a task twice (two attempts of one
	// stage carry the same key) would have the statement lock the row twice
	// and stamp it once, which reads as a lease it missed. A key named
	// under two epochs is adopted under the newer; the older claim's lease
	// is gone either way.
	epochOf := make(map[TaskKey]int64, len(tasks))
	keys := make([]TaskKey, 0, len(tasks))
	for _, t := range tasks {
		if e, seen := epochOf[t.Key]; seen {
			epochOf[t.Key] = max(e, t.Epoch)
			continue
		}
		epochOf[t.Key] = t.Epoch
		keys = append(keys, t.Key)
	}
	var out []TaskKey
	for p, ks := range byPartition(0, 255, keys) {
		plo, phi := p*partitionWidth, p*partitionWidth+partitionWidth-1
		// A row another transaction updated before the lock (the reaper
		// freeing a dead broker's leases: the very moment a successor
		// adopts them) is locked at its new version, and adopted if that
		// version still carries the epoch.
		got, locked, err := s.adoptOnce(ctx, workerID, plo, phi, ks, epochOf)
		out = append(out, got...)
		if err == nil {
			err = missedLeases("lease_adopt", locked, len(got))
		}
		if err != nil {
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
	rows, err := s.pool.Query(ctx, `SELECT locked, shard_id, resource_id, task_type, op_id
  FROM lease_adopt($1, $2, $3::int[], $4::uuid[], $5::text[], $6::uuid[], $7::bigint[], $8, coalesce($9::timestamptz, now()))`,
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
