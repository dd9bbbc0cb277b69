package resource

import (
	"fmt"
	"sort"
	"time"
)

// ConditionStatus is a condition's tri-state.
type ConditionStatus string

// The condition statuses.
const (
	ConditionTrue    ConditionStatus = "True"
	ConditionFalse   ConditionStatus = "False"
	ConditionUnknown ConditionStatus = "Unknown"
)

// The two standard condition types every resource reports.
const (
	ConditionReady  = "Ready"
	ConditionSynced = "Synced"
)

// The reasons of the synthesized conditions.
//
// Synced answers "has the live spec been reconciled?" (synced_gen vs
// generation, failure_gen):
//
//	ReconcileError   False    failure_gen = generation: the last reconcile of the live spec hard-failed
//	ReconcileSuccess True     synced_gen >= generation
//	Reconciling      Unknown  the live generation has not been reconciled yet
//
// The failure is checked first, in the same order as the phase precedence.
//
// Ready mirrors resources.is_ready exactly (True iff is_ready), so a client
// never sees Ready=True on a row whose ready flag is false; when it is False
// the reason says why, first match wins:
//
//	Available      True   synced, healthy, not being deleted
//	Deleting       False  deletion requested
//	ReconcileError False  failed for the live spec
//	Unavailable    False  synced but observed unhealthy (health_ok = false)
//	Creating       False  never reconciled (synced_gen = 0)
//	Reconciling    False  a spec change is in flight
const (
	ReasonReconcileSuccess = "ReconcileSuccess"
	ReasonReconcileError   = "ReconcileError"
	ReasonReconciling      = "Reconciling"
	ReasonAvailable        = "Available"
	ReasonUnavailable      = "Unavailable"
	ReasonCreating         = "Creating"
	ReasonDeleting         = "Deleting"
)

// Condition is a Kubernetes-style condition: stored in resource_conditions
// (written on transition by the drainer) or synthesized from the scalars.
type Condition struct {
	Type               string
	Status             ConditionStatus
	Reason             string
	Message            string
	ObservedGeneration int64
	LastTransitionTime time.Time
	// Synthesized marks a condition derived from the scalars rather than read
	// from resource_conditions.
	Synthesized bool
}

// SyncedCondition synthesizes the Synced condition from the scalars. The
// transition time is not recorded for synthesized conditions: it is reported
// as the row's updated_at, the latest instant the scalars can have changed.
func SyncedCondition(r Resource) Condition {
	c := Condition{Type: ConditionSynced, ObservedGeneration: r.Generation, LastTransitionTime: r.UpdatedAt, Synthesized: true}
	switch {
	case r.FailureGen == r.Generation:
		c.Status, c.Reason = ConditionFalse, ReasonReconcileError
		c.Message = fmt.Sprintf("reconcile of generation %d failed", r.Generation)
		if r.FailureTerminal {
			c.Message += " (terminal: not retried until the spec changes)"
		}
	case r.SyncedGen >= r.Generation:
		c.Status, c.Reason = ConditionTrue, ReasonReconcileSuccess
		c.Message = fmt.Sprintf("generation %d reconciled", r.Generation)
	default:
		c.Status, c.Reason = ConditionUnknown, ReasonReconciling
		c.Message = fmt.Sprintf("generation %d not reconciled yet (synced generation %d)", r.Generation, r.SyncedGen)
	}
	return c
}

// ReadyCondition synthesizes the Ready condition; its status is True exactly
// when r.Ready (resources.is_ready) is.
func ReadyCondition(r Resource) Condition {
	c := Condition{Type: ConditionReady, ObservedGeneration: r.Generation, LastTransitionTime: r.UpdatedAt, Synthesized: true}
	c.Status = ConditionFalse
	switch {
	case r.Ready:
		c.Status, c.Reason, c.Message = ConditionTrue, ReasonAvailable, "synced and healthy"
	case r.DeletionRequestedAt != nil:
		c.Reason, c.Message = ReasonDeleting, "deletion requested"
	case r.FailureGen == r.Generation:
		c.Reason = ReasonReconcileError
		c.Message = fmt.Sprintf("reconcile of generation %d failed", r.Generation)
	case r.SyncedGen >= r.Generation && !r.HealthOK:
		c.Reason, c.Message = ReasonUnavailable, "synced but observed unhealthy"
	case r.SyncedGen == 0:
		c.Reason, c.Message = ReasonCreating, "not reconciled yet"
	default:
		c.Reason = ReasonReconciling
		c.Message = fmt.Sprintf("generation %d not reconciled yet (synced generation %d)", r.Generation, r.SyncedGen)
	}
	return c
}

// MergeConditions returns the stored conditions plus the synthesized Ready
// and Synced ones for the types with no stored row: a stored condition
// always wins over a synthesized one. Ready and Synced come first, then the
// other types in name order.
func MergeConditions(r Resource, stored []Condition) []Condition {
	out := make([]Condition, 0, len(stored)+2)
	byType := make(map[string]Condition, len(stored))
	for _, c := range stored {
		byType[c.Type] = c
	}
	for _, std := range []struct {
		typ   string
		synth func(Resource) Condition
	}{{ConditionReady, ReadyCondition}, {ConditionSynced, SyncedCondition}} {
		if c, ok := byType[std.typ]; ok {
			out = append(out, c)
			delete(byType, std.typ)
			continue
		}
		out = append(out, std.synth(r))
	}
	rest := make([]Condition, 0, len(byType))
	for _, c := range byType {
		rest = append(rest, c)
	}
	sort.Slice(rest, func(i, j int) bool { return rest[i].Type < rest[j].Type })
	return append(out, rest...)
}
