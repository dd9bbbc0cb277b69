package browsertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/worker"
)

// leaf: a worker kind that echoes its spec into its status, fails
// terminally when its spec says so, and answers the ping verb.
const leafKind = `{"kind":"leaf","description":"A leaf: echoes its spec.","spec_schema":{"type":"object"},
 "config_schema":{"type":"object","properties":{"endpoint":{"type":"string"}}},
 "reactions":[{"name":"work","trigger":"specChange","emits":["status","conditions"]},
              {"name":"ping","trigger":"operation","verb":"ping","emits":["operationOutput"]}]}`

// net: a composite of one hub and N spokes that depend on it (with a value
// flow), rolled up once every child settled. Its spec schema requires a
// non-negative spokes count.
const netKind = `{"kind":"net","description":"A hub and its spokes.",
 "spec_schema":{"type":"object","properties":{"spokes":{"type":"integer","minimum":0}},"required":["spokes"]},
 "reactions":[{"name":"compose","trigger":"specChange","emits":["children","edges","status"]},
              {"name":"rollup","trigger":"childrenSettled","emits":["status"]}]}`

func leafWork(_ context.Context, r worker.Request) (worker.Outcome, error) {
	if r.Stage == worker.StageOperate {
		return worker.Outcome{OperationOutput: js(map[string]any{"pong": r.Resource.Name})}, nil
	}
	var spec map[string]any
	_ = json.Unmarshal(r.Resource.Spec, &spec)
	if spec["fail"] == true {
		return worker.Outcome{}, worker.Terminal(errors.New("the cloud said no: quota exceeded"))
	}
	return worker.Outcome{Status: js(map[string]any{"id": "id-" + r.Resource.Name, "spec": spec})}, nil
}

func netWork(_ context.Context, r worker.Request) (worker.Outcome, error) {
	switch r.Stage {
	case worker.StageRollup:
		ready := 0
		for _, c := range r.Children {
			if c.Phase == string(resource.PhaseReady) {
				ready++
			}
		}
		return worker.Outcome{Status: js(map[string]any{"children": len(r.Children), "ready": ready})}, nil
	case worker.StageCompose:
		var spec struct {
			Spokes    int
			FailSpoke *int `json:"failSpoke"`
		}
		if err := json.Unmarshal(r.Resource.Spec, &spec); err != nil {
			return worker.Outcome{}, worker.Terminal(err)
		}
		hub := r.Resource.Name + "-hub"
		out := worker.Outcome{Status: js(map[string]any{"phase": "composed"}),
			Children: []worker.Child{{Kind: "leaf", Name: hub, Spec: js(map[string]any{"role": "hub"})}}}
		for i := range spec.Spokes {
			name := fmt.Sprintf("%s-spoke-%d", r.Resource.Name, i)
			child := map[string]any{"role": "spoke"}
			if spec.FailSpoke != nil && *spec.FailSpoke == i {
				child["fail"] = true
			}
			out.Children = append(out.Children, worker.Child{Kind: "leaf", Name: name, Spec: js(child)})
			out.Edges = append(out.Edges, worker.Edge{Dependent: worker.Ref{Kind: "leaf", Name: name}, Dependency: worker.Ref{Kind: "leaf", Name: hub},
				ValueFlows: []worker.ValueFlow{{SrcField: "/id", DepField: "/hub_id"}}})
		}
		return out, nil
	}
	return worker.Outcome{}, fmt.Errorf("net: unexpected stage %s", r.Stage)
}

func js(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
