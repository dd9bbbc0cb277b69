package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/converge-run/converge/core/jsonb"
	"github.com/converge-run/converge/db/pgpool"
)

// Result is a finished task's outcome, appended to work_outbox for the
// drainer to apply.
type Result struct {
	Key TaskKey
	// ClaimEpoch and Generation echo the claimed task: the drain applies the
	// result only while the queue row still holds ClaimEpoch.
	ClaimEpoch int64
	Generation int64

	// Status replaces the stored status; nil keeps it.
	Status json.RawMessage
	// HealthOK sets the health axis; nil keeps it.
	HealthOK *bool
	// DeferSync keeps synced_gen where it is: a composite whose descendants
	// are still progressing reports its partial status and waits for the
	// cascade to re-pend it.
	DeferSync bool
	// Conditions are written on transition only.
	Conditions []Condition

	// Error, when set, is a failure; Terminal stops the retries.
	Error    string
	Terminal bool

	// Finalizer is the finalizer a delete task strips ("" = the kind's).
	Finalizer string
	// OperationOutput is an operate task's output.
	OperationOutput json.RawMessage
}

// Condition is a K8s-style condition a handler reports.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"` // True, False or Unknown
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Result builds a success result for the task: status and the sync advance.
func (t Task) Result(status json.RawMessage) Result {
	return Result{Key: t.Key, ClaimEpoch: t.ClaimEpoch, Generation: t.Generation, Status: status}
}

// Failure builds a failure result for the task.
func (t Task) Failure(msg string, terminal bool) Result {
	return Result{Key: t.Key, ClaimEpoch: t.ClaimEpoch, Generation: t.Generation, Error: msg, Terminal: terminal}
}

// ErrInvalidResult marks a result the outbox insert would refuse (Validate).
var ErrInvalidResult = errors.New("invalid result")

// Validate reports what would make the outbox insert refuse r (and with it
// every result batched beside it): malformed JSON documents, condition
// statuses outside True, False and Unknown, and what Postgres stores in no
// text or jsonb value (a NUL character, as a byte or as \u0000 in a
// document, invalid UTF-8, and in a document an escaped UTF-16 surrogate
// that is not half of a pair: jsonb.Check). The error wraps
// ErrInvalidResult.
func (r Result) Validate() error {
	for _, d := range []struct {
		what string
		doc  json.RawMessage
	}{{"status", r.Status}, {"operation output", r.OperationOutput}} {
		if d.doc == nil {
			continue
		}
		if err := jsonb.Check(d.doc); err != nil {
			return fmt.Errorf("%w for %s: %s %w", ErrInvalidResult, r.Key.ResourceID, d.what, err)
		}
	}
	for _, t := range []struct{ what, s string }{{"error message", r.Error}, {"finalizer", r.Finalizer}} {
		if !storable(t.s) {
			return fmt.Errorf("%w for %s: the %s holds a NUL character or invalid UTF-8, which cannot be stored", ErrInvalidResult, r.Key.ResourceID, t.what)
		}
	}
	for _, c := range r.Conditions {
		switch c.Status {
		case "True", "False", "Unknown":
		default:
			return fmt.Errorf("%w for %s: condition %q: status %q is not True, False or Unknown",
				ErrInvalidResult, r.Key.ResourceID, c.Type, c.Status)
		}
		if !storable(c.Type) || !storable(c.Reason) || !storable(c.Message) {
			return fmt.Errorf("%w for %s: condition %q holds a NUL character or invalid UTF-8, which cannot be stored",
				ErrInvalidResult, r.Key.ResourceID, c.Type)
		}
	}
	return nil
}

// storable reports whether Postgres can store s as text: valid UTF-8 with
// no NUL.
func storable(s string) bool { return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0 }

// AppendOutbox writes results to work_outbox in one batched insert and wakes
// the drainer (notify_gated('outbox_ready'), coalesced across backends).
func (s *Store) AppendOutbox(ctx context.Context, results ...Result) error {
	if len(results) == 0 {
		return nil
	}
	n := len(results)
	// Arrays: pgx would box each element of a plain slice (pgpool.Array).
	shards, ids, types, ops := make(pgpool.Array[int32], n), make(pgpool.Array[uuid.UUID], n), make(pgpool.Array[string], n), make(pgpool.Array[uuid.UUID], n)
	epochs, gens := make(pgpool.Array[int64], n), make(pgpool.Array[int64], n)
	statuses, conds, outputs := make(pgpool.Array[json.RawMessage], n), make(pgpool.Array[json.RawMessage], n), make(pgpool.Array[json.RawMessage], n)
	health, advance, terminal := make(pgpool.Array[*bool], n), make(pgpool.Array[bool], n), make(pgpool.Array[bool], n)
	errs, fins := make(pgpool.Array[*string], n), make(pgpool.Array[*string], n)
	for i := range results {
		r := &results[i] // a pointer: a copy of r whose fields are taken (errs, fins) would be one allocation per result
		if err := r.Validate(); err != nil {
			return fmt.Errorf("append outbox: %w", err)
		}
		shards[i], ids[i], types[i], ops[i] = int32(r.Key.ShardID), r.Key.ResourceID, string(r.Key.TaskType), r.Key.OpID
		epochs[i], gens[i] = r.ClaimEpoch, r.Generation
		statuses[i], outputs[i] = r.Status, r.OperationOutput
		if len(r.Conditions) > 0 {
			b, err := json.Marshal(r.Conditions)
			if err != nil {
				return fmt.Errorf("append outbox: conditions: %w", err)
			}
			conds[i] = b
		}
		health[i], advance[i], terminal[i] = r.HealthOK, !r.DeferSync, r.Terminal
		if r.Error != "" {
			errs[i] = &r.Error
		}
		if r.Finalizer != "" {
			fins[i] = &r.Finalizer
		}
	}
	_, err := s.pool.Exec(ctx, `
WITH ins AS (
    INSERT INTO work_outbox (shard_id, resource_id, task_type, op_id, claim_epoch, generation, status, health_ok,
                             advance_synced_gen, conditions, error_message, error_terminal, finalizer, operation_output)
    SELECT * FROM unnest($1::int[], $2::uuid[], $3::text[], $4::uuid[], $5::bigint[], $6::bigint[], $7::jsonb[],
                         $8::bool[], $9::bool[], $10::jsonb[], $11::text[], $12::bool[], $13::text[], $14::jsonb[])
    RETURNING 1
)
SELECT notify_gated('outbox_ready') WHERE EXISTS (SELECT 1 FROM ins)`,
		pgpool.Reserve(shards, ids, types, ops, epochs, gens, statuses, health, advance, conds, errs, terminal, fins, outputs)...)
	return wrap(err, "append %d results to the outbox", n)
}
