package worker

import (
	"encoding/json"
	"fmt"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/workerproto/childcols"
	"github.com/converge-run/converge/workerproto/composecols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

func raw(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

func configFromProto(c *workerv1.ProviderConfig) *ProviderConfig {
	if c == nil {
		return nil
	}
	return &ProviderConfig{Kind: c.GetKind(), Name: c.GetName(), IsDefault: c.GetIsDefault(),
		Spec: raw(c.GetSpecJson()), Data: raw(c.GetDataJson()), Revision: c.GetRevision()}
}

func configToProto(c ProviderConfig) *workerv1.ProviderConfig {
	return &workerv1.ProviderConfig{Kind: c.Kind, Name: c.Name, IsDefault: c.IsDefault,
		SpecJson: c.Spec, DataJson: c.Data, Revision: c.Revision}
}

var stageFromProto = map[workerv1.Stage]Stage{
	workerv1.Stage_STAGE_COMPOSE: StageCompose,
	workerv1.Stage_STAGE_WORK:    StageWork,
	workerv1.Stage_STAGE_ROLLUP:  StageRollup,
	workerv1.Stage_STAGE_DELETE:  StageDelete,
	workerv1.Stage_STAGE_OPERATE: StageOperate,
	workerv1.Stage_STAGE_REACT:   StageReact,
}

// requestFromTask builds the provider's view of a task.
func requestFromTask(t *workerv1.StageTask, def *ProviderConfig) (Request, error) {
	r := t.GetResource()
	stage, ok := stageFromProto[t.GetStage()]
	if !ok {
		// A newer broker's stage: a handler must not take it for another.
		return Request{}, fmt.Errorf("task %s has an unknown stage %d", t.GetTaskId(), int32(t.GetStage()))
	}
	req := Request{
		Stage:    stage,
		Reaction: t.GetReaction(),
		Resource: Resource{
			ID: r.GetId(), Kind: r.GetKind(), Version: r.GetVersion(), Name: r.GetName(),
			Labels: r.GetLabels(), Spec: raw(r.GetSpecJson()), Status: raw(r.GetStatusJson()),
			Generation: r.GetGeneration(), OwnerID: r.GetOwnerId(), Finalizers: r.GetFinalizers(),
		},
	}
	eff, err := Effective(def, configFromProto(t.GetConfig()))
	if err != nil {
		return req, err
	}
	req.Config = eff
	switch x := t.GetRequest().(type) {
	case *workerv1.StageTask_Work:
		req.Trigger = x.Work.GetTrigger()
	case *workerv1.StageTask_Rollup:
		if cols := x.Rollup.GetCompact(); cols != nil {
			req.Children = make([]ChildSummary, 0, childcols.Len(cols))
			err := childcols.Walk(cols, r.GetId(), func(c childcols.Child) {
				req.Children = append(req.Children, ChildSummary{ID: c.ID, Kind: c.Kind, Name: c.Name,
					Phase: c.Phase, HealthOK: c.HealthOK, Status: raw(c.Status), OwnerID: c.OwnerID})
			})
			if err != nil {
				return req, err
			}
			break
		}
		for _, c := range x.Rollup.GetChildren() {
			req.Children = append(req.Children, ChildSummary{ID: c.GetId(), Kind: c.GetKind(), Name: c.GetName(),
				Phase: c.GetPhase(), HealthOK: c.GetHealthOk(), Status: raw(c.GetStatusJson()), OwnerID: c.GetOwnerId()})
		}
	case *workerv1.StageTask_Delete:
		req.Finalizer = x.Delete.GetFinalizer()
	case *workerv1.StageTask_Operate:
		req.Operation = &Operation{ID: x.Operate.GetOperationId(), Verb: x.Operate.GetVerb(), Input: raw(x.Operate.GetInputJson())}
	case *workerv1.StageTask_React:
		req.React = &Reaction{Transition: manifest.Transition(x.React.GetTransition()), WatchKind: x.React.GetWatchKind(),
			Binding:    x.React.GetBindingName(),
			DedupToken: x.React.GetDedupToken(), Generation: x.React.GetGeneration()}
	}
	return req, nil
}

// outcomeToProto converts a handler's outcome for the wire.
func outcomeToProto(o Outcome) *workerv1.Outcome {
	out := &workerv1.Outcome{StatusJson: o.Status, HealthOk: o.HealthOK, OperationOutputJson: o.OperationOutput}
	for _, c := range o.Conditions {
		out.Conditions = append(out.Conditions, &workerv1.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
	}
	// Only a composition is worth columns; a leaf's outcome has none.
	var cols *workerv1.CompositionColumns
	ok := false
	if len(o.Children) > 0 {
		cols, ok = compositionColumns(o)
	}
	if ok {
		out.Composition = cols
	} else {
		appendLists(out, o)
	}
	for _, c := range o.Configs {
		out.Configs = append(out.Configs, configToProto(c))
	}
	return out
}

// appendLists writes o's children and edges as lists, for a composition
// columns cannot carry.
func appendLists(out *workerv1.Outcome, o Outcome) {
	for _, c := range o.Children {
		out.Children = append(out.Children, &workerv1.Child{Kind: c.Kind, Version: c.Version, Name: c.Name,
			Labels: c.Labels, SpecJson: c.Spec, ProviderConfigRef: c.ProviderConfigRef})
	}
	for _, e := range o.Edges {
		pe := &workerv1.Edge{DependentKind: e.Dependent.Kind, DependentName: e.Dependent.Name,
			DependencyKind: e.Dependency.Kind, DependencyName: e.Dependency.Name}
		for _, f := range e.ValueFlows {
			pe.ValueFlows = append(pe.ValueFlows, &workerv1.ValueFlow{SrcField: f.SrcField, DepField: f.DepField})
		}
		out.Edges = append(out.Edges, pe)
	}
}

// compositionColumns writes o's children and edges in columns, the form a
// broker that takes them reads without an allocation per child (session.go
// spells them out for one that does not). ok is false when the composition
// does not fit columns (composecols.Builder.Finish): it then goes as lists.
func compositionColumns(o Outcome) (*workerv1.CompositionColumns, bool) {
	b := composecols.NewBuilder(len(o.Children), len(o.Edges))
	for _, c := range o.Children {
		b.Child(c.Kind, c.Version, c.Name, c.Labels, c.Spec, c.ProviderConfigRef)
	}
	var flows []composecols.Flow
	for _, e := range o.Edges {
		flows = flows[:0]
		for _, f := range e.ValueFlows {
			flows = append(flows, composecols.Flow{Src: f.SrcField, Dep: f.DepField})
		}
		b.Edge(composecols.Ref{Kind: e.Dependent.Kind, Name: e.Dependent.Name},
			composecols.Ref{Kind: e.Dependency.Kind, Name: e.Dependency.Name}, flows)
	}
	return b.Finish()
}
