package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/converge-run/converge/core/resource"
)

// migrateResource moves cur to another version of its kind live, in the apply's
// transaction (the spec already validated against that version's schema):
//
//   - the row takes the new version, spec, labels and config reference, and
//     its generation always bumps (the same spec means something new under
//     another version), so it is reconciled again — by a worker serving the
//     new version, since the queue is keyed by (kind, version);
//   - its queued, unclaimed tasks (a pending reconcile, delete or operation)
//     move to the new version with it; a task a worker of the old version
//     holds finishes there, and its result, for an older generation, only
//     re-gates the resource, which then queues at the new version;
//   - a VersionMigrated event says from and to (RolledBack for a rollback to
//     a generation of the other version), and the spec history keeps the
//     new generation.
//
// The phase counts move with it (resources_count_update keys them by
// version).
func migrateResource(ctx context.Context, tx pgx.Tx, in ApplyResourceInput, cur resource.Resource, version,
	what string,
) (resource.Resource, error) {
	r, err := scanResource(tx.QueryRow(ctx, `
		UPDATE resources r SET
			version = $2,
			spec = $3::jsonb,
			labels = $4::jsonb,
			provider_config_ref = nullif($5, ''),
			generation = r.generation + 1,
			updated_at = now()
		WHERE r.id = $1
		RETURNING `+resourceColumns, cur.ID, version, string(in.Spec), in.Labels, in.ProviderConfigRef))
	if err != nil {
		return resource.Resource{}, mapErr(err, what)
	}
	if _, err := tx.Exec(ctx, `
		UPDATE work_queue w SET version = $3
		 WHERE w.shard_id = $1 AND w.resource_id = $2 AND w.worker_id IS NULL AND w.version <> $3`,
		r.ShardID, r.ID, version); err != nil {
		return resource.Resource{}, mapErr(err, what+": move its queued tasks")
	}
	if err := scheduleEligible(ctx, tx, r.ID); err != nil {
		return resource.Resource{}, err
	}
	ev := resource.Event{ResourceID: r.ID, Type: resource.EventNormal, Reason: resource.ReasonVersionMigrated,
		Actor: in.Actor, Message: fmt.Sprintf("%s → %s, generation %d", cur.Version, version, r.Generation)}
	if in.rollbackFrom > 0 {
		ev.Reason = resource.ReasonRolledBack
		ev.Message = fmt.Sprintf("generation %d carries the spec of generation %d (%s → %s)", r.Generation,
			in.rollbackFrom, cur.Version, version)
	}
	if _, err := appendEvent(ctx, tx, ev); err != nil {
		return resource.Resource{}, err
	}
	if err := recordHistory(ctx, tx, r.ID, ev.Reason, in.Actor, in.rollbackFrom); err != nil {
		return resource.Resource{}, err
	}
	return r, nil
}
