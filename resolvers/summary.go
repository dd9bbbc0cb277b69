package resolvers

import (
	"context"
	"sort"

	"github.com/converge-run/converge/core/live"

	"github.com/converge-run/converge/graph/model"
)

// Summary reads the Summary page's first paint: the totals, each
// non-reactor kind's counts (one phase-count read per kind: its cost is the
// number of kinds × phases, never the table's size) and the queue estimate.
func (q queryResolver) Summary(ctx context.Context) (*model.Summary, error) {
	totals, err := q.store.PhaseCounts(ctx, "")
	if err != nil {
		return nil, err
	}
	kinds, err := q.store.ListKinds(ctx)
	if err != nil {
		return nil, err
	}
	out := &model.Summary{PhaseCounts: toPhaseCounts(totals), ByKind: []*model.KindPhaseCount{}, Queue: []*model.KindQueueDepth{}}
	seen := map[string]bool{}
	for _, k := range kinds {
		if k.IsReactor || seen[k.Name] {
			continue
		}
		seen[k.Name] = true
		cs, err := q.store.PhaseCounts(ctx, k.Name)
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			if c.Count > 0 {
				out.ByKind = append(out.ByKind, &model.KindPhaseCount{Kind: k.Name, Phase: toPhase(c.Phase), Count: int(c.Count)})
			}
		}
	}
	depth, err := q.store.QueueDepth(ctx)
	if err != nil {
		return nil, err
	}
	byKind := map[string]*model.KindQueueDepth{}
	for key, n := range depth {
		d := byKind[key[0]]
		if d == nil {
			d = &model.KindQueueDepth{Kind: key[0]}
			byKind[key[0]] = d
			out.Queue = append(out.Queue, d)
		}
		if key[1] == "pending" {
			d.Pending = int(n)
		} else {
			d.Leased = int(n)
		}
	}
	sort.Slice(out.Queue, func(i, j int) bool { return out.Queue[i].Kind < out.Queue[j].Kind })
	out.History = toSummaryHistory(q.hub.Samples())
	return out, nil
}

func toSummaryHistory(samples []live.Sample) []*model.SummarySample {
	out := make([]*model.SummarySample, len(samples))
	for i, s := range samples {
		m := &model.SummarySample{At: s.At, Queue: make([]*model.KindQueueDepth, len(s.Queue)), PhaseCounts: toPhaseCounts(s.Phases)}
		for j, k := range s.Queue {
			m.Queue[j] = &model.KindQueueDepth{Kind: k.Kind, Pending: k.Pending, Leased: k.Leased}
		}
		out[i] = m
	}
	return out
}
