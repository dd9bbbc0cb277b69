package cli

import (
	"testing"
)

// FuzzGenerateTypes: any schema gives Go that formats and TypeScript, or an
// error; never a panic.
func FuzzGenerateTypes(f *testing.F) {
	for _, seed := range []string{
		`{"type":"object","properties":{"a":{"type":"string","enum":["x","x-","x_"]},"b":{"$ref":"#/$defs/b"}},"$defs":{"b":{"type":"array","items":{"$ref":"#/$defs/b"}}}}`,
		`{"type":["object","null"],"properties":{"":{},"-":{"type":"integer"},"1":{"type":"array"}}}`,
		`{"properties":{"Node":{"$ref":"#/$defs/node"}},"$defs":{"node":{"properties":{"next":{"$ref":"#/$defs/node"}}}}}`,
		`{"additionalProperties":{"type":"object","properties":{"x":{"type":"boolean"}}}}`,
		`null`, `[]`, `{"type":7}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, schema string) {
		in := kindTypesInput{Kind: "fuzz", Version: "v1", Spec: []byte(schema), Status: []byte(schema)}
		if _, err := generateGo(in, "fuzz"); err != nil {
			return
		}
		if _, err := generateTS(in); err != nil {
			t.Fatalf("Go generated but TypeScript failed: %v", err)
		}
	})
}
