package schema_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
	"github.com/converge-run/converge/core/worker/schema"
)

type spec struct {
	Name  string   `json:"name" jsonschema:"minLength=1,maxLength=63"`
	Size  int      `json:"size,omitempty" jsonschema:"minimum=1,maximum=10"`
	Tier  string   `json:"tier,omitempty" jsonschema:"enum=dev,enum=prod"`
	Tags  []string `json:"tags,omitempty"`
	Inner struct {
		On bool `json:"on"`
	} `json:"inner,omitzero"`
}

type status struct {
	ID string `json:"id"`
}

func TestOf_AManifestBuiltFromGoTypesValidatesLikeTheTypes(t *testing.T) {
	t.Parallel()
	m := manifest.KindManifest{Kind: "thing", SpecSchema: schema.MustOf[spec](), StatusSchema: schema.MustOf[status](),
		Reactions: []manifest.ReactionDecl{{Name: "work", Trigger: manifest.TriggerSpecChange,
			Emits: manifest.Mask(manifest.OutcomeStatus)}}}
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	_, err = manifest.Parse(raw)
	require.NoError(t, err, "the derived schemas pass the manifest's legality rules: %s", raw)
	compiled, err := manifest.CompileSchema("/spec_schema", m.SpecSchema)
	require.NoError(t, err)

	for doc, ok := range map[string]bool{
		`{"name":"a"}`: true,
		`{"name":"a","size":3,"tier":"prod","tags":["x"],"inner":{"on":true}}`: true,
		`{}`:                            false, // name is required (no omitempty)
		`{"name":""}`:                   false, // minLength
		`{"name":"a","size":11}`:        false, // maximum
		`{"name":"a","tier":"staging"}`: false, // enum
		`{"name":"a","colour":"red"}`:   false, // undeclared property
		`{"name":"a","inner":{}}`:       false, // inner.on is required
	} {
		err := compiled.Validate(json.RawMessage(doc))
		if ok {
			require.NoError(t, err, doc)
		} else {
			require.Error(t, err, doc)
		}
	}
}

func TestOf_EmptyStructIsUntyped(t *testing.T) {
	t.Parallel()
	b, err := schema.Of[struct{}]()
	require.NoError(t, err)
	require.Nil(t, b)
}
