package resource

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// OperationState is where an operator verb invocation is
// (resource_operations.state).
type OperationState string

// The operation states; Succeeded and Failed are final.
const (
	OperationPending   OperationState = "Pending"
	OperationRunning   OperationState = "Running"
	OperationSucceeded OperationState = "Succeeded"
	OperationFailed    OperationState = "Failed"
)

// Final reports whether the operation has finished.
func (s OperationState) Final() bool { return s == OperationSucceeded || s == OperationFailed }

// Operation is one invocation of an operator verb (a subresource operation)
// on a resource.
type Operation struct {
	ID         uuid.UUID
	ResourceID uuid.UUID
	Verb       string
	Input      json.RawMessage
	Output     json.RawMessage
	State      OperationState
	// Error is the handler's message when State is Failed.
	Error      string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt *time.Time
}
