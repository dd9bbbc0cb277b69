package resolvers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/vikstrous/dataloadgen"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/graph/model"
)

// Explain and undo: Resource.waitingOn / specHistory / specDiff, Kind.historyLimit,
// rollbackResource, planResource and setKindHistoryLimit.

func (k kindResolver) HistoryLimit(ctx context.Context, obj *model.Kind) (int, error) {
	return k.reads(ctx).HistoryLimit(ctx, obj.Name, obj.Version)
}

// WaitingOn explains the stored resource with obj's id. One that is not
// stored (a dry run's would-be resource, or one deleted since it was read)
// waits on nothing: an empty list, never NOT_FOUND, which would null the
// whole result around it. The explanations of a page's rows are read in one
// statement, and their blockers in one more (the response's loaders, on the
// primary).
func (r resourceResolver) WaitingOn(ctx context.Context, obj *model.Resource) ([]*model.Wait, error) {
	l := loadersFrom(ctx)
	ws, ok, err := found(l.explains.Load(ctx, obj.UUID))
	if err != nil {
		return nil, err
	}
	if !ok {
		return []*model.Wait{}, nil
	}
	var ids []uuid.UUID
	for _, w := range ws {
		ids = append(ids, w.Blockers...)
	}
	byID := make(map[uuid.UUID]resource.Resource, len(ids))
	if len(ids) > 0 {
		rows, err := l.blockers.LoadAll(ctx, ids)
		var each dataloadgen.ErrorSlice
		if err != nil && !errors.As(err, &each) {
			return nil, err
		}
		for i, id := range ids {
			switch {
			case each == nil || each[i] == nil:
				byID[id] = rows[i]
			case !errors.Is(each[i], dataloadgen.ErrNotFound):
				return nil, each[i]
			}
		}
	}
	out := make([]*model.Wait, len(ws))
	for i, w := range ws {
		m := &model.Wait{Gate: model.WaitGate(strings.ToUpper(string(w.Gate))), Message: w.Message, Since: w.Since,
			Until: w.Until, BlockerCount: w.BlockerCount, InFlight: w.InFlight, Cap: w.Cap, Blockers: []*model.Resource{}}
		if !m.Gate.IsValid() {
			return nil, fmt.Errorf("explain resource %s: unknown gate %q", obj.ID, w.Gate)
		}
		if w.BrokerID != "" {
			m.BrokerID = &w.BrokerID
		}
		for _, id := range w.Blockers {
			if b, ok := byID[id]; ok { // a blocker deleted since the explanation is left out
				m.Blockers = append(m.Blockers, toResource(b))
			}
		}
		out[i] = m
	}
	return out, nil
}

func (r resourceResolver) SpecHistory(ctx context.Context, obj *model.Resource, first *int) ([]*model.SpecRevision, error) {
	n := 20
	if first != nil {
		n = *first
		if n <= 0 {
			return nil, &store.InvalidError{Field: "first", Rule: "limit_invalid",
				Message: fmt.Sprintf("first must be 1-%d, got %d", store.MaxHistoryLimit, n)}
		}
	}
	if n > store.MaxHistoryLimit {
		return nil, &store.InvalidError{Field: "first", Rule: "out_of_range",
			Message: fmt.Sprintf("first must be 1-%d, got %d", store.MaxHistoryLimit, n)}
	}
	hs, _, err := found(loadersFrom(ctx).specs.Load(ctx, store.SpecHistoryKey{ID: obj.UUID, Limit: n}))
	if err != nil {
		return nil, err
	}
	out := make([]*model.SpecRevision, len(hs))
	for i, h := range hs {
		out[i] = toSpecRevision(h)
	}
	return out, nil
}

func toSpecRevision(h store.SpecRevision) *model.SpecRevision {
	labels, _ := json.Marshal(h.Labels)
	m := &model.SpecRevision{Generation: int(h.Generation), Spec: h.Spec, Labels: labels,
		ProviderConfigRef: optString(h.ProviderConfigRef), Version: optString(h.Version), Reason: h.Reason, Actor: h.Actor, CreatedAt: h.CreatedAt}
	if h.RolledBackFrom > 0 {
		from := int(h.RolledBackFrom)
		m.RolledBackFrom = &from
	}
	return m
}

func (r resourceResolver) SpecDiff(ctx context.Context, obj *model.Resource, from int, to *int) (*model.SpecDiff, error) {
	toGen := obj.Generation
	if to != nil {
		toGen = int64(*to)
	}
	var (
		d   store.GenerationDiff
		err error
	)
	if obj.Planned {
		d, err = r.plannedDiff(ctx, obj, int64(from), toGen)
	} else {
		d, err = r.primary.SpecDiff(ctx, obj.UUID, int64(from), toGen)
	}
	if err != nil {
		return nil, err
	}
	return &model.SpecDiff{From: from, To: int(toGen), Spec: toChanges(d.Spec), Labels: toChanges(d.Labels)}, nil
}

// plannedDiff is SpecDiff for a dry run's resource: its generation is the
// plan's (spec and labels as planned, not kept), any other one is read from
// the kept history.
func (r resourceResolver) plannedDiff(ctx context.Context, obj *model.Resource, from, to int64) (store.GenerationDiff, error) {
	type rev struct{ spec, labels json.RawMessage }
	revs := map[int64]rev{obj.Generation: {obj.Spec, obj.Labels}}
	if from != obj.Generation || to != obj.Generation {
		kept, err := r.primary.SpecHistory(ctx, obj.UUID, 0)
		if err != nil {
			return store.GenerationDiff{}, err
		}
		for _, h := range kept {
			if h.Generation == obj.Generation {
				continue
			}
			labels, err := json.Marshal(h.Labels)
			if err != nil {
				return store.GenerationDiff{}, fmt.Errorf("spec history of resource %s: labels: %w", obj.ID, err)
			}
			revs[h.Generation] = rev{h.Spec, labels}
		}
	}
	for _, g := range []int64{from, to} {
		if _, ok := revs[g]; !ok {
			return store.GenerationDiff{}, fmt.Errorf("resource %s: generation %d is not in its spec history: %w",
				obj.ID, g, store.ErrNotFound)
		}
	}
	var d store.GenerationDiff
	var err error
	if d.Spec, err = resource.Diff(revs[from].spec, revs[to].spec); err != nil {
		return store.GenerationDiff{}, err
	}
	if d.Labels, err = resource.Diff(revs[from].labels, revs[to].labels); err != nil {
		return store.GenerationDiff{}, err
	}
	return d, nil
}

func toChanges(cs []resource.Change) []*model.JSONChange {
	out := make([]*model.JSONChange, len(cs))
	for i, c := range cs {
		out[i] = &model.JSONChange{Path: c.Path, Before: c.Before, After: c.After}
	}
	return out
}

func toOutcome(o store.ApplyOutcome) model.ApplyOutcome {
	return model.ApplyOutcome(strings.ToUpper(string(o)))
}

func (m mutationResolver) RollbackResource(ctx context.Context, kind, name string, toGeneration int,
	dryRun *bool) (*model.Resource, error) {
	r, _, err := m.store.RollbackResource(ctx, kind, name, int64(toGeneration), actor(ctx), deref(dryRun))
	if err != nil {
		return nil, err
	}
	return toPlanned(r, deref(dryRun)), nil
}

func (m mutationResolver) PlanResource(ctx context.Context, in model.ResourceInput) (*model.ResourcePlan, error) {
	labels, err := labelMap("labels", in.Labels)
	if err != nil {
		return nil, err
	}
	p, err := m.store.PlanResource(ctx, store.ApplyResourceInput{Kind: in.Kind, Name: in.Name,
		Version: deref(in.Version), Labels: labels, Spec: in.Spec, ProviderConfigRef: deref(in.ProviderConfigRef),
		Actor: actor(ctx)})
	if err != nil {
		return nil, err
	}
	after := toResource(p.After)
	out := &model.ResourcePlan{Outcome: toOutcome(p.Outcome), Generation: int(p.After.Generation), Spec: after.Spec,
		Labels: after.Labels, SpecChanges: toChanges(p.SpecChanges), LabelsChanges: toChanges(p.LabelsChanges)}
	if p.Before != nil {
		out.Current = toResource(*p.Before)
	}
	return out, nil
}

func (m mutationResolver) SetKindHistoryLimit(ctx context.Context, kind, version string, limit int) (*model.Kind, error) {
	if err := m.store.SetHistoryLimit(ctx, kind, version, limit); err != nil {
		return nil, err
	}
	k, err := m.primary.GetKind(ctx, kind, version)
	if err != nil {
		return nil, err
	}
	return toKind(k), nil
}
