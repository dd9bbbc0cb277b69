// Package pipeline is the storage side of the reconcile pipeline: the
// work_queue claim, heartbeat and release a broker runs, the outbox append a
// finished task writes, the drainer's calls into drain_outbox_batch and
// drain_rollup_rechecks, the gate (schedule_eligible), operator verbs
// (enqueue_operation) and the compose application that turns a composer's
// desired children, edges and configs into rows in one fenced transaction.
//
// The SQL and plpgsql functions it calls live in db/functions, one a file; every
// hot statement is scoped with shard_id BETWEEN lo AND hi so it prunes to the
// caller's partition(s).
package pipeline

import (
	"errors"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/converge-run/converge/core/store/internal/dbx"
	"github.com/converge-run/converge/core/store/internal/schemacache"
	"github.com/converge-run/converge/db/pgpool"
)

// Store runs the pipeline's statements on the primary. Safe for concurrent use.
type Store struct {
	pool *pgxpool.Pool

	// Clock, when set, stamps every time-dependent statement (claims,
	// heartbeats, drains, compose prunes); nil means the database clock.
	Clock func() time.Time

	// schemas compiles each kind's spec and config schema once per
	// manifest generation.
	schemas *schemacache.Cache

	// rotors rotate the starting partition of each pair's wide-range
	// claims (rotorKey: one per kind, version and task type, so a broker
	// that claims from several pairs in turn moves every pair's start).
	rotorMu sync.Mutex
	rotors  map[rotorKey]uint64
}

// rotorKey is the pair a claim rotor turns for.
type rotorKey struct {
	kind, version string
	taskType      TaskType
}

// nextStart turns b's pair's rotor and returns its new position.
func (s *Store) nextStart(b Batch) uint64 {
	k := rotorKey{b.Kind, b.Version, b.TaskType}
	s.rotorMu.Lock()
	defer s.rotorMu.Unlock()
	if s.rotors == nil {
		s.rotors = map[rotorKey]uint64{}
	}
	s.rotors[k]++
	return s.rotors[k]
}

// New returns a pipeline store over the primary pool.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, schemas: schemacache.New()}
}

// TaskType is the kind of work a work_queue row asks for.
type TaskType string

// The three task types of the shared work_queue.
const (
	TaskReconcile TaskType = "reconcile"
	TaskDelete    TaskType = "delete"
	TaskOperate   TaskType = "operate"
)

// TaskKey is a work_queue row's primary key. OpID is uuid.Nil except for
// operate tasks.
type TaskKey struct {
	ShardID    int
	ResourceID uuid.UUID
	TaskType   TaskType
	OpID       uuid.UUID
}

// ErrFenced means the task's lease moved on (released, reaped or claimed again
// under a newer claim_epoch): the caller's result is stale and was not applied.
var ErrFenced = errors.New("claim fenced: the task's lease moved on")

// keyArrays splits keys into the parallel arrays the unnest statements take.
func keyArrays(keys []TaskKey) (shards pgpool.Array[int32], ids pgpool.Array[uuid.UUID], types pgpool.Array[string], ops pgpool.Array[uuid.UUID]) {
	shards = make(pgpool.Array[int32], len(keys))
	ids = make(pgpool.Array[uuid.UUID], len(keys))
	types = make(pgpool.Array[string], len(keys))
	ops = make(pgpool.Array[uuid.UUID], len(keys))
	for i, k := range keys {
		shards[i], ids[i], types[i], ops[i] = int32(k.ShardID), k.ResourceID, string(k.TaskType), k.OpID
	}
	return shards, ids, types, ops
}

// now is the Clock's time, or nil for the database clock (the statements
// read it as coalesce($n::timestamptz, now())).
func (s *Store) now() any {
	if s.Clock == nil {
		return nil
	}
	return s.Clock()
}

// wrap maps a driver error (dbx.MapErr), prefixed with what the statement did.
func wrap(err error, format string, args ...any) error { return dbx.Wrap(err, format, args...) }
