package pipeline

import (
	"encoding/json"
	"errors"

	"github.com/converge-run/converge/core/manifest"
)

// schemaKey identifies a compiled schema: one axis of a kind version at one
// manifest generation (a re-applied manifest bumps manifest_gen, so a stale
// entry is never consulted again).
type schemaKey struct {
	kind, version string
	gen           int64
	axis          string // "/spec_schema" or "/config_schema"
}

// schema returns the compiled schema for key, compiling raw on a miss. A nil
// schema (an untyped axis) validates anything.
func (s *Store) schema(key schemaKey, raw json.RawMessage) (*manifest.Schema, error) {
	s.mu.Lock()
	sc, ok := s.schemas[key]
	s.mu.Unlock()
	if ok {
		return sc, nil
	}
	sc, err := manifest.CompileSchema(key.axis, raw)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.schemas[key] = sc
	s.mu.Unlock()
	return sc, nil
}

// violation turns a validation failure into a ComposeError for child.
func violation(child, axis string, err error) error {
	var se *manifest.SchemaError
	if errors.As(err, &se) && len(se.Violations) > 0 {
		v := se.Violations[0]
		return &ComposeError{Child: child, Axis: axis, Pointer: v.Pointer, Rule: v.Rule, Message: v.Message}
	}
	return err
}
