package resource

import (
	"time"

	"github.com/google/uuid"
)

// EventType is the severity of a resource event (resource_events.type).
type EventType string

// The event types.
const (
	EventNormal  EventType = "Normal"
	EventWarning EventType = "Warning"
)

// Valid reports whether t is one of the event types.
func (t EventType) Valid() bool { return t == EventNormal || t == EventWarning }

// The reasons the store records for its own writes. Other components
// (composer, drainer, reaper) add their own.
const (
	ReasonCreated            = "Created"
	ReasonSpecUpdated        = "SpecUpdated"
	ReasonLabelsUpdated      = "LabelsUpdated"
	ReasonQuarantined        = "Quarantined"
	ReasonUnquarantined      = "Unquarantined"
	ReasonDeletionRequested  = "DeletionRequested"
	ReasonResyncRequested    = "ResyncRequested"
	ReasonOperationRequested = "OperationRequested"
	// ReasonDeadLettered: the drain stopped retrying a reconcile that failed
	// transiently max_transient_attempts times in a row (an event, and the
	// reason of the Synced=False condition).
	ReasonDeadLettered = "DeadLettered"
	// ReasonVersionMigrated: an apply moved the resource to another version
	// of its kind.
	ReasonVersionMigrated = "VersionMigrated"
	ReasonRolledBack      = "RolledBack"
)

// ActorSystem is the actor of an event nobody in particular caused.
const ActorSystem = "system"

// Event is one entry of a resource's append-only history.
type Event struct {
	ID         int64
	ResourceID uuid.UUID
	Type       EventType
	Reason     string
	Message    string
	// Actor is who caused it: an operator's identity, or "system".
	Actor     string
	CreatedAt time.Time
}
