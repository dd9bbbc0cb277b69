package cli

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestGenerateTypes_EdgeCases(t *testing.T) {
	t.Parallel()
	src, err := generateGo(kindTypesInput{Kind: "blob", Version: "v1"}, "blob")
	require.NoError(t, err)
	require.Contains(t, src, "type BlobSpec map[string]any", "an untyped spec is a map")
	require.Contains(t, src, "type BlobStatus map[string]any")
	ts, err := generateTS(kindTypesInput{Kind: "blob", Version: "v1", Spec: []byte(`{"type":"array","items":{"type":"integer"}}`)})
	require.NoError(t, err)
	require.Contains(t, ts, "export type BlobSpec = number[];")

	tree := []byte(`{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}}}}}`)
	src, err = generateGo(kindTypesInput{Kind: "tree", Version: "v1", Spec: tree}, "tree")
	require.NoError(t, err)
	require.Contains(t, src, "Kids []Node `json:\"kids,omitempty\"`", "a recursive $ref names its own type")
	require.Contains(t, src, "type TreeSpec Node")

	for schema, want := range map[string]string{
		`{"properties":{"a":{"$ref":"https://example.com/s.json"}}}`: `only local #/$defs/NAME`,
		`{"type":"object","properties":{"a":{"type":"strin"}}}`:      `.a: unknown type "strin"`,
		`{"type":7}`: "want a type name or a list of them",
	} {
		_, err := generateGo(kindTypesInput{Kind: "k", Version: "v1", Spec: []byte(schema)}, "k")
		require.ErrorContains(t, err, want, schema)
	}
	require.Equal(t, "VpcID", pascal("vpc_id"))
	require.Equal(t, "HTTPSPort", pascal("httpsPort"))
	require.Equal(t, "X3rdParty", pascal("3rd-party"))
	require.Equal(t, "Field", pascal("--"))
}
