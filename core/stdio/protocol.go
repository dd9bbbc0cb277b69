package stdio

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/converge-run/converge/core/worker"
)

// ProtocolVersion is written into every task document; a program may check it.
const ProtocolVersion = "converge.stdio/v1"

// ExitTerminal is the exit code a program uses for a failure that retrying
// cannot fix. 0 is success; any other non-zero exit is a transient failure.
const ExitTerminal = 2

// Task is the JSON document a program reads on stdin: one task.
type Task struct {
	Protocol string `json:"protocol"`
	// Stage is compose, work, rollup, delete, operate or react.
	Stage string `json:"stage"`
	// Reaction is the manifest reaction the task runs.
	Reaction string `json:"reaction"`
	// Trigger is what pended a work task: specChange or resync.
	Trigger  string       `json:"trigger,omitempty"`
	Resource TaskResource `json:"resource"`
	// Config is the effective providerconfig: the attached config's spec
	// merged over the kind's default, the bundle (data) replaced whole.
	Config TaskConfig `json:"config"`
	// DeadlineMS is the time left for this task in milliseconds (0 = none).
	DeadlineMS int64 `json:"deadline_ms,omitempty"`
	// Children is the settled subtree (rollup only).
	Children []TaskChild `json:"children,omitempty"`
	// Finalizer is the finalizer to tear down (delete only).
	Finalizer string `json:"finalizer,omitempty"`
	// Operation is the verb to run (operate only).
	Operation *TaskOperation `json:"operation,omitempty"`
	// React is the lifecycle transition delivered (react only).
	React *TaskReact `json:"react,omitempty"`
}

// TaskResource is the resource the task is about.
type TaskResource struct {
	ID         string            `json:"id"`
	Kind       string            `json:"kind"`
	Version    string            `json:"version"`
	Name       string            `json:"name"`
	Labels     map[string]string `json:"labels"`
	Spec       json.RawMessage   `json:"spec"`
	Status     json.RawMessage   `json:"status"`
	Generation int64             `json:"generation"`
	OwnerID    string            `json:"owner_id,omitempty"`
	Finalizers []string          `json:"finalizers"`
}

// TaskConfig is the effective providerconfig.
type TaskConfig struct {
	Name string          `json:"name,omitempty"`
	Spec json.RawMessage `json:"spec"`
	Data json.RawMessage `json:"data"`
}

// TaskChild is one settled descendant, as a rollup sees it.
type TaskChild struct {
	ID       string          `json:"id"`
	Kind     string          `json:"kind"`
	Name     string          `json:"name"`
	Phase    string          `json:"phase"`
	HealthOK bool            `json:"health_ok"`
	Status   json.RawMessage `json:"status"`
	OwnerID  string          `json:"owner_id,omitempty"`
}

// TaskOperation is the operator verb an operate task runs.
type TaskOperation struct {
	ID    string          `json:"id"`
	Verb  string          `json:"verb"`
	Input json.RawMessage `json:"input"`
}

// TaskReact is the lifecycle transition a react task delivers.
type TaskReact struct {
	Transition string `json:"transition"`
	Binding    string `json:"binding"`
	DedupToken string `json:"dedup_token"`
	Generation int64  `json:"generation"`
}

// Outcome is the JSON document a program writes on stdout. Every field is
// optional; the core applies only the parts the reaction's emits declares.
type Outcome struct {
	Status          json.RawMessage `json:"status,omitempty"`
	HealthOK        *bool           `json:"health_ok,omitempty"`
	Conditions      []Condition     `json:"conditions,omitempty"`
	Children        []Child         `json:"children,omitempty"`
	Edges           []Edge          `json:"edges,omitempty"`
	Configs         []OutConfig     `json:"configs,omitempty"`
	OperationOutput json.RawMessage `json:"operation_output,omitempty"`
	// Error reports a failure; it wins over the exit code.
	Error *Error `json:"error,omitempty"`
}

// Error is a failure a program reports on stdout.
type Error struct {
	Message string `json:"message"`
	// Terminal stops retries for the current generation.
	Terminal bool `json:"terminal,omitempty"`
}

// Condition is a Kubernetes-style condition.
type Condition struct {
	Type    string `json:"type"`
	Status  string `json:"status"`
	Reason  string `json:"reason,omitempty"`
	Message string `json:"message,omitempty"`
}

// Child is one desired composed child.
type Child struct {
	Kind              string            `json:"kind"`
	Version           string            `json:"version,omitempty"`
	Name              string            `json:"name"`
	Labels            map[string]string `json:"labels,omitempty"`
	Spec              json.RawMessage   `json:"spec"`
	ProviderConfigRef string            `json:"provider_config_ref,omitempty"`
}

// Ref names a resource by kind and name.
type Ref struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// Edge orders Dependent after Dependency and carries value flows.
type Edge struct {
	Dependent  Ref         `json:"dependent"`
	Dependency Ref         `json:"dependency"`
	ValueFlows []ValueFlow `json:"value_flows,omitempty"`
}

// ValueFlow copies the upstream's status field (a JSON pointer) into the
// dependent's spec.
type ValueFlow struct {
	SrcField string `json:"src_field"`
	DepField string `json:"dep_field"`
}

// OutConfig is a providerconfig a composer owns.
type OutConfig struct {
	Kind      string          `json:"kind"`
	Name      string          `json:"name"`
	IsDefault bool            `json:"is_default,omitempty"`
	Spec      json.RawMessage `json:"spec"`
	Data      json.RawMessage `json:"data,omitempty"`
}

// NewTask builds the stdin document for req.
func NewTask(req worker.Request, deadlineMS int64) Task {
	r := req.Resource
	t := Task{
		Protocol: ProtocolVersion,
		Stage:    string(req.Stage),
		Reaction: req.Reaction,
		Trigger:  req.Trigger,
		Resource: TaskResource{ID: r.ID, Kind: r.Kind, Version: r.Version, Name: r.Name, Labels: r.Labels,
			Spec: orNull(r.Spec), Status: orNull(r.Status), Generation: r.Generation, OwnerID: r.OwnerID, Finalizers: r.Finalizers},
		Config:     TaskConfig{Name: req.Config.Name, Spec: orNull(req.Config.Spec), Data: orNull(req.Config.Data)},
		DeadlineMS: deadlineMS,
		Finalizer:  req.Finalizer,
	}
	if t.Resource.Labels == nil {
		t.Resource.Labels = map[string]string{}
	}
	if t.Resource.Finalizers == nil {
		t.Resource.Finalizers = []string{}
	}
	for _, c := range req.Children {
		t.Children = append(t.Children, TaskChild{ID: c.ID, Kind: c.Kind, Name: c.Name, Phase: c.Phase,
			HealthOK: c.HealthOK, Status: orNull(c.Status), OwnerID: c.OwnerID})
	}
	if op := req.Operation; op != nil {
		t.Operation = &TaskOperation{ID: op.ID, Verb: op.Verb, Input: orNull(op.Input)}
	}
	if rc := req.React; rc != nil {
		t.React = &TaskReact{Transition: string(rc.Transition), Binding: rc.Binding, DedupToken: rc.DedupToken, Generation: rc.Generation}
	}
	return t
}

// ParseOutcome decodes a program's stdout. Empty output is an empty
// outcome; anything else must be exactly one JSON object with only the
// documented fields (a misspelt field is an error, not silently dropped).
func ParseOutcome(stdout []byte) (Outcome, error) {
	var o Outcome
	if len(bytes.TrimSpace(stdout)) == 0 {
		return o, nil
	}
	dec := json.NewDecoder(bytes.NewReader(stdout))
	dec.DisallowUnknownFields()
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return Outcome{}, fmt.Errorf("decode outcome: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return Outcome{}, errors.New("decode outcome: more than one JSON value on stdout (data after the object)")
	}
	if b := bytes.TrimSpace(raw); len(b) == 0 || b[0] != '{' {
		return Outcome{}, fmt.Errorf("decode outcome: want a JSON object, got %.40s", b)
	}
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	if err := strict.Decode(&o); err != nil {
		return Outcome{}, fmt.Errorf("decode outcome: %w", err)
	}
	return o, nil
}

// Outcome converts the document to the SDK's outcome.
func (o Outcome) Outcome() worker.Outcome {
	out := worker.Outcome{Status: nullToNil(o.Status), HealthOK: o.HealthOK, OperationOutput: nullToNil(o.OperationOutput)}
	for _, c := range o.Conditions {
		out.Conditions = append(out.Conditions, worker.Condition{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message})
	}
	for _, c := range o.Children {
		out.Children = append(out.Children, worker.Child{Kind: c.Kind, Version: c.Version, Name: c.Name, Labels: c.Labels,
			Spec: c.Spec, ProviderConfigRef: c.ProviderConfigRef})
	}
	for _, e := range o.Edges {
		we := worker.Edge{Dependent: worker.Ref{Kind: e.Dependent.Kind, Name: e.Dependent.Name},
			Dependency: worker.Ref{Kind: e.Dependency.Kind, Name: e.Dependency.Name}}
		for _, f := range e.ValueFlows {
			we.ValueFlows = append(we.ValueFlows, worker.ValueFlow{SrcField: f.SrcField, DepField: f.DepField})
		}
		out.Edges = append(out.Edges, we)
	}
	for _, c := range o.Configs {
		out.Configs = append(out.Configs, worker.ProviderConfig{Kind: c.Kind, Name: c.Name, IsDefault: c.IsDefault,
			Spec: c.Spec, Data: nullToNil(c.Data)})
	}
	return out
}

func orNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func nullToNil(b json.RawMessage) json.RawMessage {
	if len(b) == 0 || string(bytes.TrimSpace(b)) == "null" {
		return nil
	}
	return b
}
