// Package model holds the GraphQL models: the hand-written ones below (the
// objects whose nested fields are loaded by resolvers, so they carry the ids
// those resolvers need) and the ones gqlgen generates into models_gen.go.
package model

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/google/uuid"
)

// Resource is one resource. The scalar fields are filled when the row is
// read; owner, children, conditions, dependencies, dependents,
// providerConfig, root, definition, operations and history are resolved
// (batched) from the ids below.
type Resource struct {
	ID                  string
	Kind                string
	Version             string
	Name                string
	Labels              json.RawMessage
	Spec                json.RawMessage
	Status              json.RawMessage
	Phase               Phase
	Ready               bool
	Generation          int64
	SyncedGeneration    int64
	HealthOk            bool
	FailureGeneration   int64
	Finalizers          []string
	DeletionRequestedAt *time.Time
	FrozenUntil         *time.Time
	CreatedAt           time.Time
	UpdatedAt           time.Time
	ComposedGeneration  int64
	FailureTerminal     bool
	Quarantined         bool
	ProviderConfigRef   *string
	ShardID             int

	// UUID is ID parsed; OwnerID the composing parent and RootID the
	// composition root (nil for a root).
	UUID    uuid.UUID
	OwnerID *uuid.UUID
	RootID  *uuid.UUID
	// Planned marks a dry run's would-be resource: not stored as it reads
	// (not at all, for a dry-run create), so the fields that read stored
	// state answer what is stored under its id, and specDiff takes its
	// generation from the plan.
	Planned bool
}

// ProviderConfig is one provider config; owner is resolved from OwnerID.
type ProviderConfig struct {
	ID        string
	Kind      string
	Name      string
	IsDefault bool
	Spec      json.RawMessage
	Data      json.RawMessage
	CreatedAt time.Time
	UpdatedAt time.Time

	// OwnerID is the composing root; nil for a hand-authored config.
	OwnerID *uuid.UUID
}

// Operation is one operator verb invocation; resource is resolved from
// ResourceID.
type Operation struct {
	ID         string
	Verb       string
	Input      json.RawMessage
	Output     json.RawMessage
	State      OperationState
	Error      *string
	CreatedAt  time.Time
	UpdatedAt  time.Time
	FinishedAt *time.Time

	ResourceID uuid.UUID
}

// MarshalJSON writes a JSON scalar: the document as stored, or null.
func MarshalJSON(v json.RawMessage) graphql.Marshaler {
	return graphql.WriterFunc(func(w io.Writer) {
		if len(bytes.TrimSpace(v)) == 0 {
			_, _ = io.WriteString(w, "null")
			return
		}
		_, _ = w.Write(v)
	})
}

// UnmarshalJSON reads a JSON scalar input: the decoded variable or literal,
// re-encoded as a document (numbers keep their text).
func UnmarshalJSON(v any) (json.RawMessage, error) {
	if v == nil {
		return json.RawMessage("null"), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("JSON: %w", err)
	}
	return b, nil
}
