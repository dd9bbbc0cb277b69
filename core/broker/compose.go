package broker

import (
	"context"
	"errors"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/store/pipeline"
	"github.com/converge-run/converge/workerproto/composecols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// composes reports whether a task runs its kind's compose stage: a
// reconcile of a composite whose spec moved past what was composed.
func composes(t pipeline.Task, kind store.Kind) bool {
	_, hasComposer := kind.Manifest.Composer()
	return hasComposer && t.Key.TaskType == pipeline.TaskReconcile &&
		!t.IsRollup() && t.Resource.ComposedGen < t.Generation
}

// slotsFor is the slots a task's heaviest stage takes, held until the task
// ends: the compose slots for a task that will compose
// (DefaultComposeSlots), the rollup slots for any other reconcile of a kind
// with a rollup, which may read its whole subtree (DefaultRollupSlots). Other
// tasks take none (nil).
func (rn *runner) slotsFor(t pipeline.Task) *taskSlots {
	kind, ok := rn.kinds.Kind(kvOf(t))
	if !ok {
		return nil
	}
	if composes(t, kind) {
		return rn.composes
	}
	if _, hasRollup := kind.Manifest.Rollup(); hasRollup && t.Key.TaskType == pipeline.TaskReconcile {
		return rn.rollups
	}
	return nil
}

// compose runs the compose stage and writes the composition.
func (rn *runner) compose(ctx context.Context, t pipeline.Task, kind store.Kind, composer manifest.ReactionDecl, held *heldAcks) (*workerv1.Outcome, error) {
	out, ack, err := rn.stages.stage(ctx, t, kind, workerv1.Stage_STAGE_COMPOSE, composer, false,
		&workerv1.StageTask_Compose{Compose: &workerv1.ComposeRequest{}})
	held.hold(ack)
	if err != nil {
		return nil, err
	}
	if err := rn.applyCompose(ctx, t, composer, out); err != nil {
		return nil, err
	}
	return out, nil
}

// applyCompose writes a composer's output for t's root in one fenced
// transaction, keeping only the parts its reaction emits. A composition the
// store refuses (schema violation, unknown kind, cycle…) is a terminal
// failure of the root, unless the refusal is transient (an edge to a
// resource being deleted): a failure retried after its backoff. A fenced one
// means the lease moved on: abandon.
func (rn *runner) applyCompose(ctx context.Context, t pipeline.Task, r manifest.ReactionDecl, out *workerv1.Outcome) error {
	c, err := composition(r.Emits, out)
	if err != nil {
		return &stageError{msg: err.Error(), terminal: true}
	}
	// Retried while the database is unreachable: the write is fenced by the
	// claim's epoch and diffs against the children already there, so a
	// retry after a commit whose reply was lost changes nothing.
	res, err := storeStep(ctx, rn, "compose", func(ctx context.Context) (pipeline.ComposeResult, error) {
		return rn.store.ApplyCompose(ctx, t, c)
	})
	var ce *pipeline.ComposeError
	switch {
	case errors.As(err, &ce):
		return &stageError{msg: ce.Error(), terminal: !ce.Transient()}
	case errors.Is(err, pipeline.ErrFenced):
		return errAbandon
	case err != nil:
		return err
	}
	if res.RootDeleting {
		rn.log.Debug().Str("kind", t.Resource.Kind).Str("name", t.Resource.Name).
			Msg("composition not written: the root is being deleted")
		return nil
	}
	rn.log.Debug().Str("kind", t.Resource.Kind).Str("name", t.Resource.Name).Int("created", res.Created).
		Int("updated", res.Updated).Int("pruned", res.Deleted+res.Teardown+res.Orphaned).Msg("composed")
	return nil
}

// composition reads a composer's output into the store's terms, keeping
// only the parts its reaction emits. The children and edges come as lists
// or, from a worker that sends them to a broker taking them
// (Subscribed.compact_compositions), as columns; a malformed or doubled
// composition is an error.
func composition(emits manifest.OutcomeMask, out *workerv1.Outcome) (pipeline.Composition, error) {
	var c pipeline.Composition
	if cols := out.GetComposition(); cols != nil {
		if len(out.GetChildren()) > 0 || len(out.GetEdges()) > 0 {
			return c, errors.New("the outcome carries its composition both as columns and as children or edges lists")
		}
		if err := fromColumns(&c, emits, cols); err != nil {
			return c, err
		}
	} else {
		fromLists(&c, emits, out)
	}
	if emits.Has(manifest.OutcomeConfigs) {
		for _, pc := range out.GetConfigs() {
			c.Configs = append(c.Configs, pipeline.Config{Kind: pc.GetKind(), Name: pc.GetName(), IsDefault: pc.GetIsDefault(),
				Spec: raw(pc.GetSpecJson()), Data: raw(pc.GetDataJson())})
		}
	}
	return c, nil
}

// fromColumns reads a composition in columns: a child's name and spec are
// slices of the message's, and children that share a label set, and edges
// that share a value-flow list, share one map or slice.
func fromColumns(c *pipeline.Composition, emits manifest.OutcomeMask, cols *workerv1.CompositionColumns) error {
	var onChild func(int, composecols.Child)
	if emits.Has(manifest.OutcomeChildren) {
		c.Children = make([]pipeline.Child, 0, composecols.Len(cols))
		onChild = func(_ int, ch composecols.Child) {
			c.Children = append(c.Children, pipeline.Child{Kind: ch.Kind, Version: ch.Version, Name: ch.Name,
				Labels: ch.Labels, Spec: raw(ch.Spec), ProviderConfigRef: ch.ConfigRef})
		}
	}
	var onEdge func(int, composecols.Edge)
	if emits.Has(manifest.OutcomeEdges) {
		sets := composecols.FlowSets(cols)
		flows := make([][]pipeline.ValueFlow, len(sets))
		for i, set := range sets {
			flows[i] = make([]pipeline.ValueFlow, len(set))
			for j, f := range set {
				flows[i][j] = pipeline.ValueFlow{SrcField: f.Src, DepField: f.Dep}
			}
		}
		c.Edges = make([]pipeline.Edge, 0, composecols.Edges(cols))
		onEdge = func(_ int, e composecols.Edge) {
			edge := pipeline.Edge{Dependent: e.DependentName, Dependency: pipeline.Ref{Kind: e.External.Kind, Name: e.External.Name}}
			if e.Dependency >= 0 {
				edge.Dependency = pipeline.Ref{Child: e.DependencyName}
			}
			if e.FlowSet >= 0 {
				edge.ValueFlows = flows[e.FlowSet]
			}
			c.Edges = append(c.Edges, edge)
		}
	}
	return composecols.Walk(cols, onChild, onEdge)
}

// fromLists reads a composition sent as lists of children and edges.
func fromLists(c *pipeline.Composition, emits manifest.OutcomeMask, out *workerv1.Outcome) {
	// Sized up front: a composition is a thousand children and their edges.
	if emits.Has(manifest.OutcomeChildren) {
		c.Children = make([]pipeline.Child, 0, len(out.GetChildren()))
		for _, ch := range out.GetChildren() {
			c.Children = append(c.Children, pipeline.Child{Kind: ch.GetKind(), Version: ch.GetVersion(), Name: ch.GetName(),
				Labels: ch.GetLabels(), Spec: raw(ch.GetSpecJson()), ProviderConfigRef: ch.GetProviderConfigRef()})
		}
	}
	if emits.Has(manifest.OutcomeEdges) {
		type kindName struct{ kind, name string }
		children := make(map[kindName]bool, len(out.GetChildren()))
		for _, ch := range out.GetChildren() {
			children[kindName{ch.GetKind(), ch.GetName()}] = true
		}
		c.Edges = make([]pipeline.Edge, 0, len(out.GetEdges()))
		for _, e := range out.GetEdges() {
			dep := pipeline.Ref{Kind: e.GetDependencyKind(), Name: e.GetDependencyName()}
			if children[kindName{e.GetDependencyKind(), e.GetDependencyName()}] {
				dep = pipeline.Ref{Child: e.GetDependencyName()}
			}
			edge := pipeline.Edge{Dependent: e.GetDependentName(), Dependency: dep}
			if flows := e.GetValueFlows(); len(flows) > 0 {
				edge.ValueFlows = make([]pipeline.ValueFlow, 0, len(flows))
				for _, f := range flows {
					edge.ValueFlows = append(edge.ValueFlows, pipeline.ValueFlow{SrcField: f.GetSrcField(), DepField: f.GetDepField()})
				}
			}
			c.Edges = append(c.Edges, edge)
		}
	}
}
