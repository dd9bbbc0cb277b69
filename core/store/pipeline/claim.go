package pipeline

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Lease is a claimer: its worker id and the contiguous shard range it claims
// from. Lo also keys its kind_inflight partial (range_lo) for capped kinds.
type Lease struct {
	WorkerID string
	Lo, Hi   int
}

// Batch is what one claim asks for: up to Max pending tasks of one
// (kind, version, task type).
type Batch struct {
	Kind, Version string
	TaskType      TaskType
	Max           int
}

// Task is a claimed work_queue row with the resource snapshot its handler
// needs.
type Task struct {
	Key TaskKey
	// ClaimEpoch fences the result: the drain applies it only while the row
	// still holds this epoch.
	ClaimEpoch int64
	// Generation is the resource generation the task reconciles.
	Generation int64
	// Trigger is what fired it: specChange, childrenSettled, resync,
	// deleteRequested, operation.
	Trigger  string
	Attempts int
	// ProviderConfig and ProviderBundle are the attached providerconfig's spec
	// and data snapshotted at schedule time (nil: the kind's default).
	ProviderConfig json.RawMessage
	ProviderBundle json.RawMessage
	// Deadline is kind_config.task_deadline_secs (0 = none).
	Deadline time.Duration
	Resource Snapshot
}

// Snapshot is the resource as the claim read it.
type Snapshot struct {
	ID          uuid.UUID
	Kind        string
	Version     string
	Name        string
	Labels      map[string]string
	Spec        json.RawMessage
	Status      json.RawMessage
	Generation  int64
	ComposedGen int64
	OwnerID     *uuid.UUID
	Finalizers  []string
}

// claimSQL is the claim: one statement. kc is a PK probe on kind_config; for
// a capped kind (max_inflight > 0) budget asks claim_budget (max_inflight −
// SUM of the kind_inflight partials, serialised per kind) and bump adds the
// rows stamped to the claimer's own partial; an uncapped kind skips both.
// picked is the FOR UPDATE SKIP LOCKED scan of idx_work_queue_pending pruned
// to shard_id BETWEEN lo AND hi; upd stamps worker, lease, heartbeat and one
// fresh claim_epoch for the batch.
const claimSQL = `
WITH kc AS (
    SELECT max_inflight, task_deadline_secs FROM kind_config WHERE kind = $1 AND version = $2
), budget AS (
    SELECT CASE WHEN coalesce((SELECT max_inflight FROM kc), 0) > 0
                THEN claim_budget($1, $2, $4) ELSE $4 END AS n
), picked AS (
    SELECT w.shard_id, w.resource_id, w.task_type, w.op_id
      FROM work_queue w
     WHERE w.kind = $1 AND w.version = $2 AND w.task_type = $3 AND w.worker_id IS NULL
       AND w.not_before <= coalesce($8::timestamptz, now())
       AND w.shard_id BETWEEN $5 AND $6
     LIMIT (SELECT n FROM budget)
       FOR UPDATE SKIP LOCKED
), epoch AS (
    SELECT nextval('claim_epoch_seq') AS e
), upd AS (
    UPDATE work_queue w
       SET worker_id    = $7,
           leased_at    = coalesce($8::timestamptz, now()),
           heartbeat_at = coalesce($8::timestamptz, now()),
           claim_epoch  = (SELECT e FROM epoch)
      FROM picked p
     WHERE w.shard_id BETWEEN $5 AND $6
       AND w.shard_id = p.shard_id AND w.resource_id = p.resource_id
       AND w.task_type = p.task_type AND w.op_id = p.op_id
    RETURNING w.shard_id, w.resource_id, w.task_type, w.op_id, w.claim_epoch, w.generation, w.trigger,
              w.attempts, w.provider_config, w.provider_bundle
), bump AS (
    INSERT INTO kind_inflight AS k (kind, version, range_lo, in_flight)
    SELECT $1, $2, $5, count(*) FROM upd
     WHERE coalesce((SELECT max_inflight FROM kc), 0) > 0
    HAVING count(*) > 0
    ON CONFLICT (kind, version, range_lo) DO UPDATE SET in_flight = k.in_flight + EXCLUDED.in_flight
), ops AS (
    UPDATE resource_operations o SET state = 'Running', updated_at = coalesce($8::timestamptz, now())
      FROM upd
     WHERE $3 = 'operate' AND o.id = upd.op_id AND o.state = 'Pending'
)
SELECT u.shard_id, u.resource_id, u.task_type, u.op_id, u.claim_epoch, u.generation, u.trigger, u.attempts,
       u.provider_config, u.provider_bundle, coalesce((SELECT task_deadline_secs FROM kc), 0),
       r.kind, r.version, r.name, r.labels, r.spec, r.status, r.generation, r.composed_gen, r.owner_id, r.finalizers
  FROM upd u JOIN resources r ON r.id = u.resource_id`

// Claim leases up to b.Max pending tasks of one (kind, version, task type)
// in the lease's shard range, honouring the kind's concurrency cap.
func (s *Store) Claim(ctx context.Context, l Lease, b Batch) ([]Task, error) {
	rows, err := s.pool.Query(ctx, claimSQL, b.Kind, b.Version, string(b.TaskType), b.Max, l.Lo, l.Hi, l.WorkerID, s.now())
	if err != nil {
		return nil, wrap(err, "claim %s/%s %s (shards %d-%d)", b.Kind, b.Version, b.TaskType, l.Lo, l.Hi)
	}
	defer rows.Close()
	var out []Task
	for rows.Next() {
		var t Task
		var tt string
		var deadline int32
		var cfg, bundle, status []byte
		var spec []byte
		var labels map[string]string
		if err := rows.Scan(&t.Key.ShardID, &t.Key.ResourceID, &tt, &t.Key.OpID, &t.ClaimEpoch, &t.Generation,
			&t.Trigger, &t.Attempts, &cfg, &bundle, &deadline,
			&t.Resource.Kind, &t.Resource.Version, &t.Resource.Name, &labels, &spec, &status,
			&t.Resource.Generation, &t.Resource.ComposedGen, &t.Resource.OwnerID, &t.Resource.Finalizers); err != nil {
			return nil, wrap(err, "scan claimed task")
		}
		t.Key.TaskType = TaskType(tt)
		t.Resource.ID = t.Key.ResourceID
		t.Resource.Labels = labels
		t.Resource.Spec, t.Resource.Status = spec, status
		t.ProviderConfig, t.ProviderBundle = cfg, bundle
		t.Deadline = time.Duration(deadline) * time.Second
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap(err, "claim %s/%s %s (shards %d-%d)", b.Kind, b.Version, b.TaskType, l.Lo, l.Hi)
	}
	return out, nil
}

// Heartbeat stamps heartbeat_at on the tasks workerID still holds, in one
// statement pruned to [lo, hi] (the span of the keys, not the claimer's
// current range: a reshard must not orphan work already claimed). It returns
// how many are still held.
func (s *Store) Heartbeat(ctx context.Context, workerID string, lo, hi int, keys []TaskKey) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	shards, ids, types, ops := keyArrays(keys)
	tag, err := s.pool.Exec(ctx, `
UPDATE work_queue w SET heartbeat_at = coalesce($8::timestamptz, now())
  FROM unnest($3::int[], $4::uuid[], $5::text[], $6::uuid[]) AS k(shard_id, resource_id, task_type, op_id)
 WHERE w.shard_id BETWEEN $1 AND $2
   AND w.shard_id = k.shard_id AND w.resource_id = k.resource_id AND w.task_type = k.task_type AND w.op_id = k.op_id
   AND w.worker_id = $7`, lo, hi, shards, ids, types, ops, workerID, s.now())
	if err != nil {
		return 0, wrap(err, "heartbeat %d tasks (shards %d-%d)", len(keys), lo, hi)
	}
	return int(tag.RowsAffected()), nil
}

// Release gives tasks back unfinished: their lease is NULLed (and the
// claim_epoch with it, so a late result is fenced out) and they can be
// claimed again at once. Capped kinds give the slots back to the lease's
// kind_inflight partial.
func (s *Store) Release(ctx context.Context, l Lease, keys []TaskKey) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	lo, hi := shardSpan(keys)
	shards, ids, types, ops := keyArrays(keys)
	var n int
	err := s.pool.QueryRow(ctx, `
WITH rel AS (
    UPDATE work_queue w
       SET worker_id = NULL, claim_epoch = NULL, leased_at = NULL, heartbeat_at = NULL
      FROM unnest($3::int[], $4::uuid[], $5::text[], $6::uuid[]) AS k(shard_id, resource_id, task_type, op_id)
     WHERE w.shard_id BETWEEN $1 AND $2
       AND w.shard_id = k.shard_id AND w.resource_id = k.resource_id AND w.task_type = k.task_type AND w.op_id = k.op_id
       AND w.worker_id = $7
    RETURNING w.kind, w.version
), cap AS (
    INSERT INTO kind_inflight AS k (kind, version, range_lo, in_flight)
    SELECT rel.kind, rel.version, $8, -count(*)
      FROM rel JOIN kind_config kc ON kc.kind = rel.kind AND kc.version = rel.version
     WHERE kc.max_inflight > 0
     GROUP BY rel.kind, rel.version
    ON CONFLICT (kind, version, range_lo) DO UPDATE SET in_flight = k.in_flight + EXCLUDED.in_flight
)
SELECT count(*) FROM rel`, lo, hi, shards, ids, types, ops, l.WorkerID, l.Lo).Scan(&n)
	if err != nil {
		return 0, wrap(err, "release %d tasks (shards %d-%d)", len(keys), lo, hi)
	}
	return n, nil
}
