package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/resource"
)

// Conditions returns a resource's conditions: the stored rows plus the
// synthesized happy-path Ready and Synced (resource.MergeConditions) for
// the types with no stored row. ErrNotFound for an unknown id.
func (s *Store) Conditions(ctx context.Context, id uuid.UUID) ([]resource.Condition, error) {
	all, err := s.ConditionsFor(ctx, []uuid.UUID{id})
	if err != nil {
		return nil, err
	}
	conds, ok := all[id]
	if !ok {
		return nil, notFound("resource %s not found", id)
	}
	return conds, nil
}

// ConditionsFor is Conditions for many resources in one round trip (the
// batch behind the API's dataloader). Unknown ids are absent from the map.
func (s *Store) ConditionsFor(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]resource.Condition, error) {
	out := make(map[uuid.UUID][]resource.Condition, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	batch := &pgx.Batch{}
	batch.Queue(`SELECT id, generation, synced_gen, health_ok, failure_gen, failure_terminal,
		deletion_requested_at, is_ready, updated_at
		FROM resources WHERE id = ANY($1::uuid[])`, ids)
	batch.Queue(`SELECT resource_id, type, status, coalesce(reason, ''), coalesce(message, ''),
		observed_generation, last_transition_time
		FROM resource_conditions WHERE resource_id = ANY($1::uuid[])`, ids)
	br := s.read.SendBatch(ctx, batch)
	defer func() { _ = br.Close() }()

	rows, err := br.Query()
	if err != nil {
		return nil, mapErr(err, "conditions")
	}
	resources, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (resource.Resource, error) {
		var r resource.Resource
		err := row.Scan(&r.ID, &r.Generation, &r.SyncedGen, &r.HealthOK, &r.FailureGen, &r.FailureTerminal,
			&r.DeletionRequestedAt, &r.Ready, &r.UpdatedAt)
		return r, err
	})
	if err != nil {
		return nil, mapErr(err, "conditions")
	}
	rows, err = br.Query()
	if err != nil {
		return nil, mapErr(err, "conditions")
	}
	stored := map[uuid.UUID][]resource.Condition{}
	for rows.Next() {
		var id uuid.UUID
		var c resource.Condition
		var status string
		if err := rows.Scan(&id, &c.Type, &status, &c.Reason, &c.Message, &c.ObservedGeneration,
			&c.LastTransitionTime); err != nil {
			rows.Close()
			return nil, mapErr(err, "conditions")
		}
		c.Status = resource.ConditionStatus(status)
		stored[id] = append(stored[id], c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("conditions: %w", err)
	}
	for _, r := range resources {
		out[r.ID] = resource.MergeConditions(r, stored[r.ID])
	}
	return out, nil
}

// StoredConditionsFor returns the stored resource_conditions rows of each
// resource (no synthesis: merge them with resource.MergeConditions and the
// row already in hand), in one statement.
func (s *Store) StoredConditionsFor(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID][]resource.Condition, error) {
	out := map[uuid.UUID][]resource.Condition{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := s.read.Query(ctx, `
SELECT resource_id, type, status, coalesce(reason, ''), coalesce(message, ''), observed_generation, last_transition_time
  FROM resource_conditions WHERE resource_id = ANY($1::uuid[])`, ids)
	if err != nil {
		return nil, mapErr(err, "conditions")
	}
	defer rows.Close()
	for rows.Next() {
		var id uuid.UUID
		var c resource.Condition
		var status string
		if err := rows.Scan(&id, &c.Type, &status, &c.Reason, &c.Message, &c.ObservedGeneration,
			&c.LastTransitionTime); err != nil {
			return nil, mapErr(err, "conditions")
		}
		c.Status = resource.ConditionStatus(status)
		out[id] = append(out[id], c)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr(err, "conditions")
	}
	return out, nil
}
