package manifest_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/converge-run/converge/core/manifest"
)

// Parse a kind manifest, inspect its roles, and validate a resource spec
// against its compiled spec schema.
func ExampleParse() {
	m, err := manifest.Parse([]byte(`{
		"kind": "network",
		"spec_schema": {"type": "object", "properties": {"cidr": {"type": "string"}}, "required": ["cidr"]},
		"reactions": [
			{"name": "compose", "trigger": "specChange", "emits": ["children", "edges", "status"]},
			{"name": "rollup", "trigger": "childrenSettled", "emits": ["status"]},
			{"name": "teardown", "trigger": "deleteRequested", "emits": ["finalizer"], "finalizer": "converge.run/network"}
		]
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	composer, _ := m.Composer()
	fmt.Println(m.KindVersion(), "composer:", composer.Name, composer.Emits.Names(), "finalizer:", m.Finalizer())

	spec, _ := manifest.CompileSchema("/spec_schema", m.SpecSchema)
	fmt.Println(spec.Validate(json.RawMessage(`{"cidr": 10}`)))

	_, err = manifest.Parse([]byte(`{"kind": "network", "reactions": [
		{"name": "compose", "trigger": "specChange", "emits": ["children"]}]}`))
	var ve *manifest.ValidationError
	if errors.As(err, &ve) {
		fmt.Println(ve.Rule, "at", ve.Pointer)
	}
	// Output:
	// network/v1 composer: compose [children edges status] finalizer: converge.run/network
	// spec/cidr: expected string, but got number [type]
	// composer_requires_status at /reactions/0/emits
}
