package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store/internal/dbx"
)

// The operator actions are carried out by plpgsql (00003_maintenance.sql);
// the store resolves (kind, name) to the id, records who asked in the
// resource's events and returns the row as the function left it, all in one
// transaction.

// Quarantine sets the resource aside (quarantine_resource): frozen from every
// scheduler, excluded from its root's rollup, never reaped; phase
// Quarantined. An orphan is refused (ErrConflict): it is frozen already, on
// its grace deadline, which a quarantine would replace for good — and
// lifting the quarantine would then make a resource its owner no longer
// composes live again, never swept.
func (s *Store) Quarantine(ctx context.Context, kind, name, actor string) (resource.Resource, error) {
	return s.operatorAction(ctx, kind, name, actor, "quarantine_resource", resource.ReasonQuarantined, "quarantined",
		func(cur resource.Resource) (bool, error) {
			if cur.FrozenUntil != nil && !cur.Quarantined && cur.DeletionRequestedAt == nil {
				return false, conflict("resource %s/%s is orphaned: its owner no longer composes it, and it is deleted at %s "+
					"unless re-adopted; a quarantine would drop that deadline (re-adopt it by composing it again, "+
					"or let the grace run out)", kind, name, cur.FrozenUntil.UTC().Format(time.RFC3339))
			}
			return true, nil
		})
}

// Unquarantine lifts a quarantine (unquarantine_resource) and re-arms the
// resource's scheduling. A resource that is not quarantined is returned as
// it is, and no event is recorded.
func (s *Store) Unquarantine(ctx context.Context, kind, name, actor string) (resource.Resource, error) {
	return s.operatorAction(ctx, kind, name, actor, "unquarantine_resource", resource.ReasonUnquarantined, "quarantine lifted",
		func(cur resource.Resource) (bool, error) { return cur.Quarantined, nil })
}

// RequestDeletion soft-deletes the resource (request_resource_deletion):
// marks its teardown tree and kicks the sweep. The row is returned Deleting;
// when the inline sweep already removed it (no finalizer, nothing blocking),
// the row is returned as it was with DeletionRequestedAt set and phase
// Deleting, the state it passed through.
func (s *Store) RequestDeletion(ctx context.Context, kind, name, actor string) (resource.Resource, error) {
	return s.operatorAction(ctx, kind, name, actor, "request_resource_deletion", resource.ReasonDeletionRequested, "deletion requested", nil)
}

// Resync re-pends the resource for a fresh observe without a generation bump
// (resync_resource).
func (s *Store) Resync(ctx context.Context, kind, name, actor string) (resource.Resource, error) {
	return s.operatorAction(ctx, kind, name, actor, "resync_resource", resource.ReasonResyncRequested, "resync requested", nil)
}

// operatorAction runs fn (a trusted constant: one of the functions above) on
// the resource (kind, name). check, when set, judges the row first, read
// under its row lock: an error refuses the action, false skips it (the row
// is returned as it is, no event recorded).
func (s *Store) operatorAction(ctx context.Context, kind, name, actor, fn, reason, message string,
	check func(cur resource.Resource) (bool, error)) (resource.Resource, error) {
	what := fmt.Sprintf("resource %s/%s", kind, name)
	var out resource.Resource
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := dbx.ByKeyOnly(ctx, tx); err != nil {
			return err
		}
		lock := ""
		if check != nil {
			lock = " FOR UPDATE"
		}
		cur, err := scanResource(tx.QueryRow(ctx,
			`SELECT `+resourceColumns+` FROM resources r WHERE r.kind = $1 AND r.name = $2`+lock, kind, name))
		if err != nil {
			return mapErr(err, what)
		}
		if check != nil {
			act, err := check(cur)
			if err != nil || !act {
				out = cur
				return err
			}
		}
		// The event goes first: a deletion may remove the row (and, by
		// cascade, its events) inside the function.
		ev, err := appendEvent(ctx, tx, resource.Event{ResourceID: cur.ID, Type: resource.EventNormal,
			Reason: reason, Message: message, Actor: actor})
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT `+fn+`($1)`, cur.ID); err != nil {
			return mapErr(err, what)
		}
		out, err = scanResource(tx.QueryRow(ctx, `SELECT `+resourceColumns+` FROM resources r WHERE r.id = $1`, cur.ID))
		if errors.Is(err, pgx.ErrNoRows) && fn == "request_resource_deletion" {
			out = cur
			at := ev.CreatedAt
			out.DeletionRequestedAt, out.Phase, out.Ready = &at, resource.PhaseDeleting, false
			return nil
		}
		return mapErr(err, what)
	})
	if err != nil {
		return resource.Resource{}, err
	}
	return out, nil
}

const operationColumns = `o.id, o.resource_id, o.verb, o.input, o.output, o.state, coalesce(o.error, ''),
	o.created_at, o.updated_at, o.finished_at`

func scanOperation(row pgx.Row) (resource.Operation, error) {
	var op resource.Operation
	var state string
	err := row.Scan(&op.ID, &op.ResourceID, &op.Verb, &op.Input, &op.Output, &state, &op.Error,
		&op.CreatedAt, &op.UpdatedAt, &op.FinishedAt)
	op.State = resource.OperationState(state)
	return op, err
}

// RunOperation invokes an operator verb on the resource (kind, name): the
// verb must be declared by an operation reaction of the resource's kind
// version (else *InvalidError on field "verb"); enqueue_operation records
// it and queues its task. A resource being deleted takes no operations
// (ErrConflict).
func (s *Store) RunOperation(ctx context.Context, kind, name, verb string, input json.RawMessage, actor string) (resource.Operation, error) {
	in, err := jsonValue("input", input)
	if err != nil {
		return resource.Operation{}, err
	}
	what := fmt.Sprintf("resource %s/%s", kind, name)
	var op resource.Operation
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		var id uuid.UUID
		var version string
		var deleting bool
		var gen int64
		err := tx.QueryRow(ctx, `
			SELECT r.id, r.version, r.deletion_requested_at IS NOT NULL, m.manifest_gen
			  FROM resources r JOIN kind_manifest m ON m.kind = r.kind AND m.version = r.version
			 WHERE r.kind = $1 AND r.name = $2`, kind, name).Scan(&id, &version, &deleting, &gen)
		if err != nil {
			return mapErr(err, what)
		}
		e, err := s.kinds.get(ctx, tx, kind, version, gen, nil)
		if err != nil {
			return err
		}
		if _, ok := e.manifest.Operation(verb); !ok {
			declared := e.manifest.Verbs()
			if len(declared) == 0 {
				return invalid("verb", "verb_unknown", "kind %s/%s declares no operation verbs", kind, version)
			}
			return invalid("verb", "verb_unknown", "kind %s/%s declares no verb %q (declared: %s)",
				kind, version, verb, strings.Join(declared, ", "))
		}
		if deleting {
			return conflict("%s is being deleted", what)
		}
		if _, err := appendEvent(ctx, tx, resource.Event{ResourceID: id, Type: resource.EventNormal,
			Reason: resource.ReasonOperationRequested, Message: "verb " + verb, Actor: actor}); err != nil {
			return err
		}
		var opID uuid.UUID
		if err := tx.QueryRow(ctx, `SELECT enqueue_operation($1, $2, $3::jsonb)`, id, verb, in).Scan(&opID); err != nil {
			return mapErr(err, what)
		}
		op, err = scanOperation(tx.QueryRow(ctx, `SELECT `+operationColumns+` FROM resource_operations o WHERE o.id = $1`, opID))
		return mapErr(err, "operation "+opID.String())
	})
	if err != nil {
		return resource.Operation{}, err
	}
	return op, nil
}

// GetOperation returns the operation id.
func (s *Store) GetOperation(ctx context.Context, id uuid.UUID) (resource.Operation, error) {
	op, err := scanOperation(s.read.QueryRow(ctx, `SELECT `+operationColumns+` FROM resource_operations o WHERE o.id = $1`, id))
	return op, mapErr(err, "operation "+id.String())
}

// OperationsKey asks for the newest Limit operations of one resource.
type OperationsKey struct {
	ResourceID uuid.UUID
	Limit      int
}

// OperationsFor returns each resource's operations, newest first: one
// statement per distinct limit (capped at 100), as one batch.
func (s *Store) OperationsFor(ctx context.Context, keys []OperationsKey) (map[OperationsKey][]resource.Operation, error) {
	byLimit := map[int][]uuid.UUID{}
	var limits []int
	for _, k := range keys {
		if _, ok := byLimit[k.Limit]; !ok {
			limits = append(limits, k.Limit)
		}
		byLimit[k.Limit] = append(byLimit[k.Limit], k.ResourceID)
	}
	out := make(map[OperationsKey][]resource.Operation, len(keys))
	if len(limits) == 0 {
		return out, nil
	}
	batch := &pgx.Batch{}
	for _, l := range limits {
		if l < 0 {
			return nil, invalid("first", "limit_invalid", "must be positive, got %d", l)
		}
		batch.Queue(`
SELECT `+operationColumns+`
  FROM unnest($1::uuid[]) AS u(id)
 CROSS JOIN LATERAL (
        SELECT * FROM resource_operations x WHERE x.resource_id = u.id
         ORDER BY x.created_at DESC LIMIT $2
       ) o
 ORDER BY o.resource_id, o.created_at DESC`, byLimit[l], min(max(l, 1), 100))
	}
	br := s.read.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()
	for _, l := range limits {
		rows, err := br.Query()
		if err != nil {
			return nil, mapErr(err, "operations")
		}
		for rows.Next() {
			op, err := scanOperation(rows)
			if err != nil {
				rows.Close()
				return nil, mapErr(err, "operations")
			}
			k := OperationsKey{ResourceID: op.ResourceID, Limit: l}
			out[k] = append(out[k], op)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, mapErr(err, "operations")
		}
	}
	return out, nil
}

// OperationsByIDs returns the operations with the given ids, keyed by id
// (the subscription hub's re-read).
func (s *Store) OperationsByIDs(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]resource.Operation, error) {
	out := make(map[uuid.UUID]resource.Operation, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.read.Query(ctx, `SELECT `+operationColumns+` FROM resource_operations o WHERE o.id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, mapErr(err, "operations by id")
	}
	defer rows.Close()
	for rows.Next() {
		op, err := scanOperation(rows)
		if err != nil {
			return nil, mapErr(err, "operations by id")
		}
		out[op.ID] = op
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "operations by id")
	}
	return out, nil
}

// OperationForTask reads an operation row for the operate task running it.
// A broker's read, so it goes to the primary: a task is dispatched right
// after the write that pended it, and a lagging replica would be wrong here.
func (s *Store) OperationForTask(ctx context.Context, id uuid.UUID) (resource.Operation, error) {
	op, err := scanOperation(s.primary.QueryRow(ctx, `SELECT `+operationColumns+` FROM resource_operations o WHERE o.id = $1`, id))
	return op, mapErr(err, "operation "+id.String())
}
