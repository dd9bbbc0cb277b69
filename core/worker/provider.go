// Package worker is the Go worker SDK. A worker binary hosts providers — one
// per served (kind, version) — and Serve dials IN to a broker over Connect,
// advertises the kinds and their readiness, runs the stage tasks it is sent
// and streams back their outcomes. A worker never touches the database.
//
// A provider declares no schema, no reactions and no policy: those live in
// the kind's manifest. It only runs handler code, keyed by the reaction name
// the broker ships with each task.
package worker

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/converge-run/converge/core/manifest"
)

// Provider serves one (kind, version). Its methods are called from
// different goroutines (Work on up to Options.MaxParallel at once, OnConfig
// and Ready beside them): synchronize what they share.
type Provider interface {
	// Kind is the ONE (kind, version) this provider serves. Pure.
	Kind() manifest.KindVersion
	// Work runs one task: the reaction named by req.Reaction at req.Stage.
	// Return Terminal(err) for a failure that retrying cannot fix (it stops
	// retries for the current generation); any other error is transient and
	// retried with backoff.
	Work(ctx context.Context, req Request) (Outcome, error)
	// OnConfig is called with the kind's default providerconfig when it is
	// first pulled and on every edit, and with the zero ProviderConfig when
	// the default is deleted. Keep it quick; dial lazily. A panic is logged
	// and stays in the call.
	OnConfig(cfg ProviderConfig)
	// Ready reports whether the provider can take work now (for instance,
	// its client is dialled). An unready kind gets no tasks. It is polled
	// (Options.ReadinessEvery) on a goroutine of its own, one call at a
	// time: one that has not returned within 100ms counts as unready until
	// it does (logged once), and the session goes on meanwhile. Keep it
	// quick; a panic counts as unready.
	Ready() bool
}

// Stage is the part of the reconcile pipeline a task runs.
type Stage string

// The stages.
const (
	StageCompose Stage = "compose"
	StageWork    Stage = "work"
	StageRollup  Stage = "rollup"
	StageDelete  Stage = "delete"
	StageOperate Stage = "operate"
	StageReact   Stage = "react"
)

// Resource is the snapshot of the resource a task is about.
type Resource struct {
	ID         string
	Kind       string
	Version    string
	Name       string
	Labels     map[string]string
	Spec       json.RawMessage
	Status     json.RawMessage
	Generation int64
	OwnerID    string
	Finalizers []string
}

// ProviderConfig is a providerconfig document.
type ProviderConfig struct {
	Kind      string
	Name      string
	IsDefault bool
	Spec      json.RawMessage
	Data      json.RawMessage
	Revision  int64
}

// EffectiveConfig is the config a task runs with: the attached config's spec
// merged key by key over the default's (the attached one wins per key), and
// the attached bundle replacing the default's whole.
type EffectiveConfig struct {
	// Name is the attached config's name, or the default's.
	Name string
	Spec json.RawMessage
	Data json.RawMessage
}

// ChildSummary is one descendant as a rollup sees it.
type ChildSummary struct {
	ID       string
	Kind     string
	Name     string
	Phase    string
	HealthOK bool
	Status   json.RawMessage
	OwnerID  string
}

// Operation is the operator verb an OPERATE task runs.
type Operation struct {
	ID    string
	Verb  string
	Input json.RawMessage
}

// Reaction is the lifecycle transition a REACT task delivers.
type Reaction struct {
	Transition manifest.Transition
	// WatchKind is the watched resource's kind: Request.Resource carries the
	// watched resource's id, name and parts, but the reactor's own kind and
	// version. A name is unique within its kind only.
	WatchKind string
	Binding   string
	// DedupToken is stable across redeliveries (<id>:<transition>:<generation>:<binding>):
	// key idempotent side effects on it.
	DedupToken string
	Generation int64
}

// Request is one task as a provider sees it.
type Request struct {
	Stage    Stage
	Reaction string
	Resource Resource
	Config   EffectiveConfig
	// Trigger is what pended a WORK task: specChange or resync.
	Trigger string
	// Children is set for ROLLUP: the settled subtree.
	Children []ChildSummary
	// Finalizer is set for DELETE: the finalizer to tear down.
	Finalizer string
	// Operation is set for OPERATE.
	Operation *Operation
	// React is set for REACT.
	React *Reaction
}

// Condition is a Kubernetes-style condition.
type Condition struct {
	Type    string
	Status  string // True, False or Unknown
	Reason  string
	Message string
}

// ValueFlow copies an upstream status field into a dependent's spec.
type ValueFlow struct {
	SrcField string // JSON pointer into the upstream's status
	DepField string // JSON pointer into the dependent's spec
}

// Child is one desired composed child.
type Child struct {
	Kind              string
	Version           string
	Name              string
	Labels            map[string]string
	Spec              json.RawMessage
	ProviderConfigRef string
}

// Ref names a resource by kind and name.
type Ref struct {
	Kind string
	Name string
}

// Edge orders Dependent after Dependency and carries value flows.
type Edge struct {
	Dependent  Ref
	Dependency Ref
	ValueFlows []ValueFlow
}

// Outcome is what a handler returns; the core applies only the parts the
// reaction's Emits declares.
type Outcome struct {
	Status json.RawMessage
	// HealthOK nil leaves health unchanged.
	HealthOK        *bool
	Conditions      []Condition
	Children        []Child
	Edges           []Edge
	Configs         []ProviderConfig
	OperationOutput json.RawMessage
}

// TerminalError marks a failure retrying cannot fix.
type TerminalError struct{ Err error }

func (e *TerminalError) Error() string { return e.Err.Error() }
func (e *TerminalError) Unwrap() error { return e.Err }

// Terminal wraps err as a terminal failure: the resource goes FAILED for its
// current generation and is not retried until its spec changes.
func Terminal(err error) error {
	if err == nil {
		return nil
	}
	return &TerminalError{Err: err}
}

// IsTerminal reports whether err is (or wraps) a terminal failure.
func IsTerminal(err error) bool {
	var t *TerminalError
	return errors.As(err, &t)
}
