package pipeline

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/db/pgpool"
)

// Lease is a claimer: its worker id and the contiguous shard range it claims
// from. Lo also keys its kind_inflight partial (range_lo) for capped kinds.
type Lease struct {
	WorkerID string
	Lo, Hi   int
}

// Batch is what one claim asks for: up to Max pending tasks of one
// (kind, version, task type), its due rollups first.
type Batch struct {
	Kind, Version string
	TaskType      TaskType
	Max           int
	// OnlyRollups claims only rollups (trigger childrenSettled): a
	// composite's pair whose room its composes fill (they wait in the
	// broker for its few compose slots) still claims the rollups that
	// finish its trees.
	OnlyRollups bool
}

// IsRollup reports whether a task is a rollup: a reconcile its
// children's settling fired (the claim's settled part takes these first).
func (t Task) IsRollup() bool { return t.Trigger == string(manifest.TriggerChildrenSettled) }

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
	ID      uuid.UUID
	Kind    string
	Version string
	Name    string
	// LabelsJSON is the labels as Postgres prints them (a JSON object of
	// strings), decoded by Labels only for a reaction that reads them:
	// decoding a map for every claimed task was about a tenth of
	// converge's allocations per leaf, for reactions that mostly read the
	// spec alone.
	LabelsJSON  []byte
	Spec        json.RawMessage
	Status      json.RawMessage
	Generation  int64
	ComposedGen int64
	OwnerID     *uuid.UUID
	Finalizers  []string
}

// Labels decodes the resource's labels (nil when it has none).
func (s Snapshot) Labels() (map[string]string, error) {
	if len(s.LabelsJSON) == 0 {
		return nil, nil
	}
	m, err := decodeLabels(s.LabelsJSON)
	if err != nil {
		return nil, fmt.Errorf("the labels of %s %s/%s are not a JSON object of strings: %w", s.Kind, s.Version, s.Name, err)
	}
	return m, nil
}

// claimSQL is the claim: claim_span (db/functions) over shards [$5, $6],
// which lie in one partition (Claim splits a wider range). The statement
// lives in the function so that it runs under settings that leave the
// ordered walk of idx_work_queue_pending its one cheap plan whatever the
// queue's statistics say (a partition analyzed while its rows were all dead
// looks empty to the planner however much it holds); the function's
// comment says what each part of it does.
const claimSQL = `SELECT * FROM claim_span($1, $2, $3, $4, $5, $6, $7, coalesce($8::timestamptz, now()), $9, $10)`

// partitionWidth is the number of shards per work_queue partition (the
// migration tiles 256 shards into 16 partitions).
const partitionWidth = 16

// partitionSpans splits [lo, hi] at partition boundaries, starting at the
// span after the one that start picks, so successive calls rotate and no
// partition of a wide range starves.
func partitionSpans(lo, hi int, start uint64) [][2]int {
	var spans [][2]int
	for p := lo / partitionWidth; p <= hi/partitionWidth; p++ {
		spans = append(spans, [2]int{max(lo, p*partitionWidth), min(hi, p*partitionWidth+partitionWidth-1)})
	}
	if n := len(spans); n > 1 {
		k := int(start % uint64(n))
		spans = append(spans[k:], spans[:k]...)
	}
	return spans
}

// Claim leases up to b.Max pending tasks of one (kind, version, task type)
// in the lease's shard range, honouring the kind's concurrency cap, in one
// statement. A range inside one partition is claim_span's. A wider one is
// claim_spans': it probes which of the range's partitions hold claimable
// rows (an idle pair costs one probe, not one per partition), then runs
// claim_span on each of those, one partition at a time (each statement
// prunes to its partition), starting from the partition after the one the
// pair's last claim started at (each pair has its own rotor: shared, a
// broker sweeping an even number of pairs gave each pair the same start
// every time). A claim that fails leases nothing.
func (s *Store) Claim(ctx context.Context, l Lease, b Batch) ([]Task, error) {
	var start uint64
	if l.Lo/partitionWidth != l.Hi/partitionWidth {
		start = s.nextStart(b)
	}
	spans := partitionSpans(l.Lo, l.Hi, start)
	// claim_span plans its statements for each call with its arguments:
	// kept as a session's generic plan, made while the queue and resources
	// were small, the claim read the partition and resources by Seq Scan on
	// every claim while a bulk apply grew them
	// (TestPlans_BrokerSessionPlannedOnEmptyTables).
	sql, lo, hi := claimSQL, any(spans[0][0]), any(spans[0][1])
	if len(spans) > 1 {
		los, his := spanBounds(spans)
		sql, lo, hi = claimSpansSQL, los, his
	}
	scratch := claimScratch.Get().(*[]Task)
	defer claimScratch.Put(scratch)
	out, err := s.claimRows(ctx, b, (*scratch)[:0], sql, b.Kind, b.Version, string(b.TaskType), b.Max,
		lo, hi, l.WorkerID, s.now(), l.Lo, b.OnlyRollups)
	if err != nil {
		err = wrap(err, "claim %s/%s %s (shards %d-%d)", b.Kind, b.Version, b.TaskType, l.Lo, l.Hi)
	}
	tasks := exactTasks(out)
	clear(out) // the scratch keeps no claimed task's documents
	*scratch = out[:0]
	return tasks, err
}

// claimSpansSQL is the claim over several partitions' spans: claim_spans
// (db/functions), the probe and each span's claim_span in one statement.
const claimSpansSQL = `SELECT * FROM claim_spans($1, $2, $3, $4, $5::int[], $6::int[], $7, coalesce($8::timestamptz, now()), $9, $10)`

// claimScratch holds the slices claims scan into. A claim's rows arrive
// one by one, so a slice grown by append would be allocated about twice
// over (a 320-byte task each time), and the claim's slice lives until its
// last task ends: the rows go into a reused scratch slice, and the claim
// gets a copy of exactly its size. That was an eighth of the broker's
// allocated bytes at a 100k run's rate.
var claimScratch = sync.Pool{New: func() any { return new([]Task) }}

// exactTasks copies tasks into a slice of their size (nil for none).
func exactTasks(tasks []Task) []Task {
	if len(tasks) == 0 {
		return nil
	}
	out := make([]Task, len(tasks))
	copy(out, tasks)
	return out
}

// spanBounds splits spans into their low and high bounds (statement arrays).
func spanBounds(spans [][2]int) (los, his []int32) {
	for _, sp := range spans {
		los, his = append(los, int32(sp[0])), append(his, int32(sp[1]))
	}
	return los, his
}

// claimRows runs a claim statement (claim_span's or claim_spans' columns)
// and returns the tasks it leased in out, an empty scratch slice. On an
// error it returns none (and keeps none in out): a statement that failed
// leased nothing (a row that fails to scan is a bug here, and the leases of
// its statement wait out the stale-lease window). Each row is scanned into
// one scratch task through one destination list, then copied: per row,
// only what pgx itself allocates (the strings, the JSON, the owner id).
func (s *Store) claimRows(ctx context.Context, b Batch, out []Task, sql string, args ...any) ([]Task, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	var (
		t                         Task
		tt                        string
		deadline                  int32
		cfg, bundle, status, spec []byte
	)
	dest := []any{&t.Key.ShardID, &t.Key.ResourceID, &knownText{&tt, taskTypeNames}, &t.Key.OpID, &t.ClaimEpoch, &t.Generation,
		&knownText{&t.Trigger, triggerNames}, &t.Attempts, &cfg, &bundle, &deadline,
		&knownText{&t.Resource.Kind, []string{b.Kind}}, &knownText{&t.Resource.Version, []string{b.Version}},
		&t.Resource.Name, &t.Resource.LabelsJSON, &spec, &status,
		&t.Resource.Generation, &t.Resource.ComposedGen, &t.Resource.OwnerID, &t.Resource.Finalizers}
	for rows.Next() {
		t = Task{} // pgx allocates each value it scans (a fresh owner id too): the copies share nothing
		if err := rows.Scan(dest...); err != nil {
			clear(out)
			return out[:0], fmt.Errorf("scan claimed task: %w", err)
		}
		t.Key.TaskType = TaskType(tt)
		t.Resource.ID = t.Key.ResourceID
		t.Resource.Spec, t.Resource.Status = spec, status
		t.ProviderConfig, t.ProviderBundle = cfg, bundle
		t.Deadline = time.Duration(deadline) * time.Second
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		clear(out)
		return out[:0], err
	}
	return out, nil
}

// knownText scans a text column into *s, without allocating when the value
// is one of known: the claim's kind and version, a task type, a trigger.
// pgx allocates a string for each text column of each row it scans, and
// those four were most of a claimed row's strings. The columns are NOT
// NULL (a NULL would read as "").
type knownText struct {
	s     *string
	known []string
}

// ScanBytes is pgx's BytesScanner: v is the driver's memory, valid during
// the call.
func (k *knownText) ScanBytes(v []byte) error {
	for _, s := range k.known {
		if string(v) == s {
			*k.s = s
			return nil
		}
	}
	*k.s = string(v)
	return nil
}

var (
	taskTypeNames = []string{string(TaskReconcile), string(TaskDelete), string(TaskOperate)}
	triggerNames  = func() []string {
		names := make([]string, len(manifest.AllTriggers))
		for i, tr := range manifest.AllTriggers {
			names[i] = string(tr)
		}
		return names
	}()
)

// The lease statements (heartbeat, release, adopt) are the functions
// lease_heartbeat, lease_release and lease_adopt: each locks the rows of its
// keys (a primary-key probe a key, in key order) and then stamps them by TID
// in their own partition, so no statistic of the queue can turn the stamp
// into a walk of the partition. The stamp runs on a snapshot taken after the
// lock, so a row another transaction updated in between (a heartbeat racing
// a release) is stamped at its new version. (Written as one statement, such
// a row was locked at a version the statement's own snapshot could not see,
// and skipped: a released task stayed leased until the reaper, and the
// store re-ran the statement until none was missed.) The functions report
// the rows they locked beside the rows they changed; a difference is a bug,
// returned as an error by missedLeases.

// missedLeases is the error for a lease statement that changed fewer rows
// than it locked, or nil.
func missedLeases(what string, locked, changed int) error {
	if changed < locked {
		return fmt.Errorf("%s: changed %d of the %d leases it locked", what, changed, locked)
	}
	return nil
}

// byPartition groups keys inside [lo, hi] by work_queue partition, each
// group in primary-key order: the lease functions lock rows in array order, and the
// drain locks a partition's queue rows in key order too, so a heartbeat or
// a release can never hold one row the drain wants while waiting for
// another the drain holds (a deadlock the detector would break by rolling
// back a whole drain batch).
func byPartition(lo, hi int, keys []TaskKey) map[int][]TaskKey {
	out := map[int][]TaskKey{}
	for _, k := range keys {
		if k.ShardID >= lo && k.ShardID <= hi {
			out[k.ShardID/partitionWidth] = append(out[k.ShardID/partitionWidth], k)
		}
	}
	for _, ks := range out {
		slices.SortFunc(ks, compareKeys)
	}
	return out
}

// compareKeys orders task keys as work_queue's primary key does (shard_id,
// resource_id, task_type, op_id; uuids byte-wise, as Postgres compares them).
func compareKeys(a, b TaskKey) int {
	return cmp.Or(
		cmp.Compare(a.ShardID, b.ShardID),
		bytes.Compare(a.ResourceID[:], b.ResourceID[:]),
		strings.Compare(string(a.TaskType), string(b.TaskType)),
		bytes.Compare(a.OpID[:], b.OpID[:]),
	)
}

// Heartbeat stamps heartbeat_at on the tasks workerID still holds among keys
// in [lo, hi] (the span of the in-flight keys, not the claimer's current
// range: a reshard must not orphan work already claimed), one statement per
// partition. It returns how many are still held.
func (s *Store) Heartbeat(ctx context.Context, workerID string, lo, hi int, keys []TaskKey) (int, error) {
	total := 0
	for p, ks := range byPartition(lo, hi, keys) {
		shards, ids, types, ops := keyArrays(ks)
		plo, phi := p*partitionWidth, p*partitionWidth+partitionWidth-1
		var locked, changed int
		err := s.pool.QueryRow(ctx, `SELECT locked, changed FROM lease_heartbeat($1, $2, $3::int[], $4::uuid[], $5::text[], $6::uuid[], $7, coalesce($8::timestamptz, now()))`,
			pgpool.Reserve(plo, phi, shards, ids, types, ops, workerID, s.now())...).Scan(&locked, &changed)
		if err == nil {
			err = missedLeases("lease_heartbeat", locked, changed)
		}
		total += changed
		if err != nil {
			return total, wrap(err, "heartbeat %d tasks (shards %d-%d)", len(ks), plo, phi)
		}
	}
	return total, nil
}

// Release gives tasks back unfinished: their lease is NULLed (and the
// claim_epoch with it, so a late result is fenced out) and they can be
// claimed again at once. Capped kinds give the slots back to the lease's
// kind_inflight partial (range_lo = l.Lo, the partial its claims bumped).
func (s *Store) Release(ctx context.Context, l Lease, keys []TaskKey) (int, error) {
	total := 0
	for p, ks := range byPartition(0, 255, keys) {
		shards, ids, types, ops := keyArrays(ks)
		plo, phi := p*partitionWidth, p*partitionWidth+partitionWidth-1
		var locked, changed int
		err := s.pool.QueryRow(ctx, `SELECT locked, changed FROM lease_release($1, $2, $3::int[], $4::uuid[], $5::text[], $6::uuid[], $7, $8)`,
			pgpool.Reserve(plo, phi, shards, ids, types, ops, l.WorkerID, l.Lo)...).Scan(&locked, &changed)
		if err == nil {
			err = missedLeases("lease_release", locked, changed)
		}
		total += changed
		if err != nil {
			return total, wrap(err, "release %d tasks (shards %d-%d)", len(ks), plo, phi)
		}
	}
	return total, nil
}

// RecordLostAttempt counts one attempt of the reconcile task t whose worker
// was lost mid-stage (its process died or its stream ended without the
// result being redelivered) against its kind's live max_transient_attempts
// (kind_config, read here as the drain reads it), like a transient failure:
// attempts is bumped while the lease is still t's (its claim_epoch). It
// returns the attempts now recorded, the bound, and whether this loss is the
// max-th in a row: then attempts is left as is and the caller finishes the
// task as a transient failure, which the drain dead-letters (attempts+1 >=
// max). A bound of 0 never dead-letters. ErrFenced: the lease moved on.
func (s *Store) RecordLostAttempt(ctx context.Context, t Task) (attempts, limit int, last bool, err error) {
	k := t.Key
	err = s.pool.QueryRow(ctx, `
UPDATE work_queue w
   SET attempts = o.prev + CASE WHEN o.last THEN 0 ELSE 1 END
  FROM (SELECT q.attempts AS prev, coalesce(kc.max_transient_attempts, 0) AS lim,
               coalesce(kc.max_transient_attempts > 0 AND q.attempts + 1 >= kc.max_transient_attempts, false) AS last
          FROM work_queue q
          LEFT JOIN kind_config kc ON kc.kind = q.kind AND kc.version = q.version
         WHERE q.shard_id BETWEEN $1 AND $1 AND q.resource_id = $2 AND q.task_type = $3 AND q.op_id = $4
           AND q.claim_epoch = $5
           FOR UPDATE OF q) o
 WHERE w.shard_id BETWEEN $1 AND $1 AND w.resource_id = $2 AND w.task_type = $3 AND w.op_id = $4
   AND w.claim_epoch = $5
RETURNING w.attempts, o.lim, o.last`,
		k.ShardID, k.ResourceID, string(k.TaskType), k.OpID, t.ClaimEpoch).Scan(&attempts, &limit, &last)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, ErrFenced
	}
	if err != nil {
		return 0, 0, false, wrap(err, "record a lost attempt of %s task of %s", k.TaskType, k.ResourceID)
	}
	return attempts, limit, last, nil
}
