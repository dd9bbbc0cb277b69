package resource

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// Resource is one row of the resources table as the API and the runtime see
// it: a root or a composed child. Phase and Ready are read from the stored
// generated columns, never computed here.
type Resource struct {
	ID      uuid.UUID
	Kind    string
	Version string
	Name    string
	Labels  map[string]string
	Spec    json.RawMessage
	// Status is the handler-reported status; nil until a reconcile reports one.
	Status json.RawMessage

	// Phase is the stored readiness signal (resources.phase).
	Phase Phase
	// Ready is resources.is_ready: synced_gen >= generation AND health_ok AND
	// not being deleted.
	Ready bool

	// Generation bumps on every spec change.
	Generation int64
	// SyncedGen is the generation the last successful full reconcile reached.
	SyncedGen int64
	// ComposedGen is the generation the composer last expanded.
	ComposedGen int64
	// HealthOK is the observed health axis (default true).
	HealthOK bool
	// FailureGen is the generation a reconcile last hard-failed at;
	// FailureGen == Generation means failed for the live spec.
	FailureGen int64
	// FailureTerminal marks a failure the reaper must not retry.
	FailureTerminal bool

	Finalizers          []string
	DeletionRequestedAt *time.Time
	// FrozenUntil is the orphan-grace deadline: nil for a live row and for a
	// quarantined one (frozen_until = 'infinity' is reported as Quarantined).
	FrozenUntil *time.Time
	// Quarantined is frozen_until = 'infinity': an operator set the row aside.
	Quarantined bool

	// OwnerID is the composing parent (nil for a root); RootID the top-level
	// composition root (nil for a root).
	OwnerID *uuid.UUID
	RootID  *uuid.UUID
	// ProviderConfigRef names a non-default providerconfig of this kind ("" =
	// the kind's default).
	ProviderConfigRef string
	ShardID           int

	CreatedAt time.Time
	UpdatedAt time.Time
}

// PhaseCount is the number of resources in one phase.
type PhaseCount struct {
	Phase Phase
	Count int64
}
