// Package schema derives a kind manifest's JSON Schemas from Go types, so
// the spec_schema, status_schema and config_schema a manifest declares
// match the structs a provider decodes. It is built on invopop/jsonschema:
// `json` tags name the properties (a field without omitempty is required),
// `jsonschema` tags add constraints (`jsonschema:"minimum=1,maximum=10"`,
// `enum=a,enum=b`, `pattern=…`, `description=…`), and properties a struct
// does not declare are refused (additionalProperties: false).
//
// The result is plain bytes: the manifest stays data, and nothing at run
// time depends on the Go type.
package schema

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/invopop/jsonschema"
)

// Of is the JSON Schema (draft 2020-12) of T, inlined (no $ref), or nil for
// struct{} — an axis the kind leaves untyped (omit it from the manifest).
func Of[T any]() (json.RawMessage, error) {
	t := reflect.TypeFor[T]()
	if t.Kind() == reflect.Struct && t.NumField() == 0 {
		return nil, nil
	}
	r := jsonschema.Reflector{DoNotReference: true, ExpandedStruct: true}
	s := r.ReflectFromType(t)
	s.ID = ""
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("schema of %s: %w", t, err)
	}
	return b, nil
}

// MustOf is Of for package-level manifests built from static types: it
// panics if T cannot be described (a programming error, found by the
// first test that builds the manifest).
func MustOf[T any]() json.RawMessage {
	b, err := Of[T]()
	if err != nil {
		panic(err)
	}
	return b
}
