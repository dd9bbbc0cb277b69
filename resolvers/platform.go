package resolvers

import (
	"context"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/graph/model"
)

// Usage is one kind version's resource count and the live members serving it
// (every kind of a list read at once, by the response's loader).
func (r kindResolver) Usage(ctx context.Context, obj *model.Kind) (*model.KindUsage, error) {
	u, _, err := found(loadersFrom(ctx).usages.Load(ctx, manifest.KindVersion{Kind: obj.Name, Version: obj.Version}))
	if err != nil {
		return nil, err
	}
	return &model.KindUsage{Resources: int(u.Resources), ServedBy: u.ServedBy}, nil
}

// DeadLetter is set while the resource's live generation is a dead letter:
// terminally failed with the drain's DeadLettered Synced condition for it.
func (r resourceResolver) DeadLetter(ctx context.Context, obj *model.Resource) (*model.DeadLetter, error) {
	if !obj.FailureTerminal || obj.FailureGeneration != obj.Generation {
		return nil, nil
	}
	stored, _, err := found(loadersFrom(ctx).conditions.Load(ctx, obj.UUID))
	if err != nil {
		return nil, err
	}
	for _, c := range stored {
		if c.Type == resource.ConditionSynced && c.Reason == resource.ReasonDeadLettered &&
			c.ObservedGeneration == obj.Generation {
			return &model.DeadLetter{Generation: int(c.ObservedGeneration), Message: c.Message,
				Since: c.LastTransitionTime}, nil
		}
	}
	return nil, nil
}

// DeleteKindManifest removes one kind version, never stranding what depends on it.
func (m mutationResolver) DeleteKindManifest(ctx context.Context, kind, version string) (bool, error) {
	return m.store.DeleteManifest(ctx, kind, version)
}
