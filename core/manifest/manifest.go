// Package manifest is the kind manifest (CRD) model: a kind is pure data — JSON
// Schemas, the reactions the core dispatches off, and operational policy —
// applied to the kind_manifest table. The core never reads a kind name; it
// dispatches off the (Trigger, Emits) pairs declared here.
package manifest

import (
	"encoding/json"
	"fmt"
)

// DefaultVersion is the version of a manifest that names none.
const DefaultVersion = "v1"

// Trigger is the condition that fires a reaction: a closed set.
type Trigger string

// The closed set of triggers.
const (
	TriggerSpecChange      Trigger = "specChange"
	TriggerChildrenSettled Trigger = "childrenSettled"
	TriggerDeleteRequested Trigger = "deleteRequested"
	TriggerOperation       Trigger = "operation"
	TriggerReactor         Trigger = "reactor"
	TriggerResync          Trigger = "resync"
)

// AllTriggers lists every trigger in declaration order.
var AllTriggers = []Trigger{TriggerSpecChange, TriggerChildrenSettled, TriggerDeleteRequested,
	TriggerOperation, TriggerReactor, TriggerResync}

// Valid reports whether t is in the closed set.
func (t Trigger) Valid() bool {
	for _, x := range AllTriggers {
		if t == x {
			return true
		}
	}
	return false
}

// OutcomeBit is one part of a handler's Outcome that the core may apply.
type OutcomeBit uint16

// The outcome bits, in their canonical order.
const (
	OutcomeChildren OutcomeBit = 1 << iota
	OutcomeEdges
	OutcomeConfigs
	OutcomeStatus
	OutcomeConditions
	OutcomeFinalizer
	OutcomeOperationOutput
	OutcomeSideEffect
)

var outcomeNames = []struct {
	bit  OutcomeBit
	name string
}{
	{OutcomeChildren, "children"},
	{OutcomeEdges, "edges"},
	{OutcomeConfigs, "configs"},
	{OutcomeStatus, "status"},
	{OutcomeConditions, "conditions"},
	{OutcomeFinalizer, "finalizer"},
	{OutcomeOperationOutput, "operationOutput"},
	{OutcomeSideEffect, "sideEffect"},
}

// String is the outcome's manifest name.
func (b OutcomeBit) String() string {
	for _, o := range outcomeNames {
		if o.bit == b {
			return o.name
		}
	}
	return fmt.Sprintf("OutcomeBit(%d)", uint16(b))
}

// ParseOutcome maps a manifest name to its bit.
func ParseOutcome(name string) (OutcomeBit, bool) {
	for _, o := range outcomeNames {
		if o.name == name {
			return o.bit, true
		}
	}
	return 0, false
}

// OutcomeMask is a set of outcome bits: the parts of an Outcome the core
// applies for a reaction. In JSON it is an array of names.
type OutcomeMask uint16

// Mask builds a mask from bits.
func Mask(bits ...OutcomeBit) OutcomeMask {
	var m OutcomeMask
	for _, b := range bits {
		m |= OutcomeMask(b)
	}
	return m
}

// Has reports whether the mask contains b.
func (m OutcomeMask) Has(b OutcomeBit) bool { return m&OutcomeMask(b) != 0 }

// Bits lists the mask's bits in canonical order.
func (m OutcomeMask) Bits() []OutcomeBit {
	var out []OutcomeBit
	for _, o := range outcomeNames {
		if m.Has(o.bit) {
			out = append(out, o.bit)
		}
	}
	return out
}

// Names lists the mask's outcome names in canonical order.
func (m OutcomeMask) Names() []string {
	out := []string{}
	for _, b := range m.Bits() {
		out = append(out, b.String())
	}
	return out
}

// MarshalJSON writes the mask as an array of names.
func (m OutcomeMask) MarshalJSON() ([]byte, error) { return json.Marshal(m.Names()) }

// UnmarshalJSON reads an array of names.
func (m *OutcomeMask) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return fmt.Errorf("emits: %w", err)
	}
	var out OutcomeMask
	for _, n := range names {
		bit, ok := ParseOutcome(n)
		if !ok {
			return fmt.Errorf("emits: unknown outcome %q", n)
		}
		out |= OutcomeMask(bit)
	}
	*m = out
	return nil
}

// ReadBit is one part of a task's input that a reaction's handler reads.
type ReadBit uint8

// The read bits, in their canonical order. A task's identity (id, kind,
// version, name, generation, owner) is always sent and is not a part.
const (
	ReadSpec        ReadBit = 1 << iota // "spec"
	ReadStatus                          // "status"
	ReadLabels                          // "labels"
	ReadFinalizers                      // "finalizers"
	ReadChildStatus                     // "childStatus": a rollup's children's status documents
)

var readNames = []struct {
	bit  ReadBit
	name string
}{
	{ReadSpec, "spec"},
	{ReadStatus, "status"},
	{ReadLabels, "labels"},
	{ReadFinalizers, "finalizers"},
	{ReadChildStatus, "childStatus"},
}

// String is the part's manifest name.
func (b ReadBit) String() string {
	for _, r := range readNames {
		if r.bit == b {
			return r.name
		}
	}
	return fmt.Sprintf("ReadBit(%d)", uint8(b))
}

// ParseRead maps a manifest name to its bit.
func ParseRead(name string) (ReadBit, bool) {
	for _, r := range readNames {
		if r.name == name {
			return r.bit, true
		}
	}
	return 0, false
}

// ReadMask is a set of ReadBits: the parts of a resource a reaction's
// handler receives. In JSON it is an array of names.
type ReadMask uint8

// Reads builds a mask from bits.
func Reads(bits ...ReadBit) ReadMask {
	var m ReadMask
	for _, b := range bits {
		m |= ReadMask(b)
	}
	return m
}

// AllReads is every part: what a reaction that declares no reads gets.
const AllReads = ReadMask(ReadSpec | ReadStatus | ReadLabels | ReadFinalizers | ReadChildStatus)

// Has reports whether the mask contains b.
func (m ReadMask) Has(b ReadBit) bool { return m&ReadMask(b) != 0 }

// Names lists the mask's part names in canonical order ([] when empty).
func (m ReadMask) Names() []string {
	out := []string{}
	for _, r := range readNames {
		if m.Has(r.bit) {
			out = append(out, r.name)
		}
	}
	return out
}

// MarshalJSON writes the mask as an array of names.
func (m ReadMask) MarshalJSON() ([]byte, error) { return json.Marshal(m.Names()) }

// UnmarshalJSON reads an array of names.
func (m *ReadMask) UnmarshalJSON(b []byte) error {
	var names []string
	if err := json.Unmarshal(b, &names); err != nil {
		return fmt.Errorf("reads: %w", err)
	}
	var out ReadMask
	for _, n := range names {
		bit, ok := ParseRead(n)
		if !ok {
			return fmt.Errorf("reads: unknown part %q", n)
		}
		out |= ReadMask(bit)
	}
	*m = out
	return nil
}

// Transition is a lifecycle edge a reactor binding subscribes to.
type Transition string

// The closed set of transitions.
const (
	TransitionCreated  Transition = "created"
	TransitionSynced   Transition = "synced"
	TransitionDegraded Transition = "degraded"
	TransitionFailed   Transition = "failed"
	TransitionDeleted  Transition = "deleted"
)

// AllTransitions lists every transition.
var AllTransitions = []Transition{TransitionCreated, TransitionSynced, TransitionDegraded, TransitionFailed, TransitionDeleted}

// Valid reports whether t is in the closed set.
func (t Transition) Valid() bool {
	for _, x := range AllTransitions {
		if t == x {
			return true
		}
	}
	return false
}

// ReactionDecl is one (Trigger, Emits) pair a kind declares, with what its
// handler reads.
type ReactionDecl struct {
	// Name is the stable handle a worker keys its handler by (kind, Name).
	Name    string      `json:"name"`
	Trigger Trigger     `json:"trigger"`
	Emits   OutcomeMask `json:"emits"`
	// Verb is only for Trigger=operation: the subresource verb it handles.
	Verb string `json:"verb,omitempty"`
	// Finalizer is only for Trigger=deleteRequested: the finalizer it strips.
	Finalizer string `json:"finalizer,omitempty"`
	// Reads lists the parts of the resource the handler reads; nil (absent
	// in the manifest) reads them all.
	Reads *ReadMask `json:"reads,omitempty"`
}

// Reading is the reaction's effective reads: AllReads when it declares none.
func (r ReactionDecl) Reading() ReadMask {
	if r.Reads == nil {
		return AllReads
	}
	return *r.Reads
}

// KindManifest is a kind's CRD: schemas, reactions and lifecycle policy.
// It is data only; the fixture/API JSON format uses snake_case keys.
type KindManifest struct {
	Kind         string          `json:"kind"`
	Version      string          `json:"version,omitempty"`
	Description  string          `json:"description,omitempty"`
	SpecSchema   json.RawMessage `json:"spec_schema,omitempty"`
	StatusSchema json.RawMessage `json:"status_schema,omitempty"`
	ConfigSchema json.RawMessage `json:"config_schema,omitempty"`
	Reactions    []ReactionDecl  `json:"reactions"`
	// FinalizerName set → two-phase delete (deleteRequested teardown).
	FinalizerName string `json:"finalizer_name,omitempty"`

	// Operational policy, seeded insert-if-absent into kind_config on apply
	// and operator-editable live afterwards.
	MaxInflight        int  `json:"max_inflight,omitempty"`
	TaskDeadlineSecs   int  `json:"task_deadline_secs,omitempty"`
	ResyncIntervalSecs int  `json:"resync_interval_secs,omitempty"`
	ResyncRecomposes   bool `json:"resync_recomposes,omitempty"`
	OrphanGraceSecs    int  `json:"orphan_grace_secs,omitempty"`
	// MaxTransientAttempts bounds a reconcile's transient failures in a
	// row before it is dead-lettered (terminal). nil = the default,
	// DefaultMaxTransientAttempts; 0 = never.
	MaxTransientAttempts *int `json:"max_transient_attempts,omitempty"`
}

// DefaultMaxTransientAttempts is the dead-letter bound a manifest that names
// none seeds (kind_manifest_after_apply seeds the same).
const DefaultMaxTransientAttempts = 20

// KindVersion names one served (kind, version) pair.
type KindVersion struct {
	Kind    string
	Version string
}

// String renders "kind/version".
func (kv KindVersion) String() string { return kv.Kind + "/" + kv.Version }

// KindVersion is the manifest's (kind, version), the version defaulted.
func (m KindManifest) KindVersion() KindVersion {
	v := m.Version
	if v == "" {
		v = DefaultVersion
	}
	return KindVersion{Kind: m.Kind, Version: v}
}

// IsReactor reports whether the kind declares only reactor reactions (≥1):
// it owns no resource in the graph and is wired by reactor bindings.
func (m KindManifest) IsReactor() bool {
	if len(m.Reactions) == 0 {
		return false
	}
	for _, r := range m.Reactions {
		if r.Trigger != TriggerReactor {
			return false
		}
	}
	return true
}

func (m KindManifest) find(pred func(ReactionDecl) bool) (ReactionDecl, bool) {
	for _, r := range m.Reactions {
		if pred(r) {
			return r, true
		}
	}
	return ReactionDecl{}, false
}

// Composer is the specChange reaction that emits children, if any.
func (m KindManifest) Composer() (ReactionDecl, bool) {
	return m.find(func(r ReactionDecl) bool { return r.Trigger == TriggerSpecChange && r.Emits.Has(OutcomeChildren) })
}

// Worker is the specChange reaction that does not emit children, if any.
func (m KindManifest) Worker() (ReactionDecl, bool) {
	return m.find(func(r ReactionDecl) bool { return r.Trigger == TriggerSpecChange && !r.Emits.Has(OutcomeChildren) })
}

// Rollup is the childrenSettled reaction that emits status, if any.
func (m KindManifest) Rollup() (ReactionDecl, bool) {
	return m.find(func(r ReactionDecl) bool { return r.Trigger == TriggerChildrenSettled && r.Emits.Has(OutcomeStatus) })
}

// Resync is the resync reaction, if any.
func (m KindManifest) Resync() (ReactionDecl, bool) {
	return m.find(func(r ReactionDecl) bool { return r.Trigger == TriggerResync })
}

// Deleter is the deleteRequested reaction, if any.
func (m KindManifest) Deleter() (ReactionDecl, bool) {
	return m.find(func(r ReactionDecl) bool { return r.Trigger == TriggerDeleteRequested })
}

// Operation is the operation reaction for verb, if any.
func (m KindManifest) Operation(verb string) (ReactionDecl, bool) {
	return m.find(func(r ReactionDecl) bool { return r.Trigger == TriggerOperation && r.Verb == verb })
}

// Reactor is the reactor reaction, if any.
func (m KindManifest) Reactor() (ReactionDecl, bool) {
	return m.find(func(r ReactionDecl) bool { return r.Trigger == TriggerReactor })
}

// Finalizer is the finalizer string a deletion seeds: FinalizerName, else the
// Deleter's own finalizer. Empty → hard delete.
func (m KindManifest) Finalizer() string {
	if m.FinalizerName != "" {
		return m.FinalizerName
	}
	if d, ok := m.Deleter(); ok {
		return d.Finalizer
	}
	return ""
}

// Verbs lists the operation verbs the kind handles.
func (m KindManifest) Verbs() []string {
	var out []string
	for _, r := range m.Reactions {
		if r.Trigger == TriggerOperation {
			out = append(out, r.Verb)
		}
	}
	return out
}
