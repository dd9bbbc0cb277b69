package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
)

// shapeSchemas are schemas every keyword a shape checks appears in, alone
// and together, at its edges.
var shapeSchemas = []string{
	`true`, `false`, `{}`,
	`{"type":"object","properties":{"a":{"type":"string"},"n":{"type":"integer","minimum":0,"maximum":10}},"required":["a"],"additionalProperties":false}`,
	`{"type":["object","null"],"properties":{"a":{"type":["string","integer"]}},"required":["a","b"]}`,
	`{"type":"object","additionalProperties":{"type":"integer","exclusiveMinimum":-1,"exclusiveMaximum":3}}`,
	`{"type":"object","properties":{"a":false,"b":true},"additionalProperties":{"type":"boolean"}}`,
	`{"type":"number","minimum":-2,"maximum":1}`,
	`{"type":"integer","exclusiveMinimum":0}`,
	`{"type":"number","exclusiveMaximum":0}`,
	`{"type":"string","minLength":2,"maxLength":3}`,
	`{"type":"string","pattern":"^[0-9.]+/[0-9]+$"}`,
	`{"pattern":"é","minLength":1}`,
	`{"enum":["a","é",true,null]}`,
	`{"type":"string","enum":["a","b"]}`,
	`{"type":"array","items":{"type":"integer","maximum":1},"minItems":1,"maxItems":3}`,
	`{"type":"array","items":{"type":"object","required":["a"]}}`,
	`{"items":false}`,
	`{"type":"object","properties":{"o":{"type":"object","properties":{"x":{"type":"number","minimum":0,"maximum":1}},"additionalProperties":false}},"additionalProperties":false}`,
	`{"title":"t","description":"d","default":{},"examples":[1],"$comment":"c","deprecated":true,"readOnly":true,"type":"object"}`,
}

// shapeValues are values at the schemas' edges.
var shapeValues = []string{
	`null`, `true`, `false`, `0`, `-0`, `1`, `-1`, `2`, `3`, `10`, `11`, `-2`, `-3`, `0.5`, `-0.5`, `1.0`, `-1.0`, `0.0`,
	`1.5`, `-2.5`, `2.000`, `1e0`, `0.1e1`, `999999999999999999`, `1000000000000000000`, `-1.00001`, `0.99999`,
	`""`, `"a"`, `"b"`, `"ab"`, `"abc"`, `"abcd"`, `"é"`, `"éé"`, `"ééé"`, `"éééé"`, `"10.0.0.0/16"`, `"x10.0.0.0/16"`,
	`"a\"b"`, `"\u0061"`, "\"\xff\"", `{}`, `[]`, `[1]`, `[0,1,2]`, `[0,1,2,3]`, `[2]`, `[{"a":1}]`, `[{}]`, `[true]`,
}

var shapeKeys = []string{"a", "b", "n", "o", "x", "c", "é"}

// genShaped writes a document near a shape: objects of the schemas' names,
// arrays and edge values, with odd spacing.
func genShaped(r *rand.Rand, depth int) string {
	ws := []string{"", "", " ", "\n\t"}[r.IntN(4)]
	switch n := r.IntN(10); {
	case depth < 3 && n < 4:
		var b strings.Builder
		b.WriteString("{" + ws)
		for i := range r.IntN(4) {
			if i > 0 {
				b.WriteString("," + ws)
			}
			fmt.Fprintf(&b, "%q%s:%s", shapeKeys[r.IntN(len(shapeKeys))], ws, genShaped(r, depth+1))
		}
		return b.String() + ws + "}"
	case depth < 3 && n < 6:
		var b strings.Builder
		b.WriteString("[" + ws)
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteString("," + ws)
			}
			b.WriteString(genShaped(r, depth+1))
		}
		return b.String() + ws + "]"
	default:
		return shapeValues[r.IntN(len(shapeValues))]
	}
}

// libraryAccepts is the full validator's verdict, without the shape.
func libraryAccepts(t testing.TB, s *Schema, doc []byte) bool {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return false
	}
	return s.compiled.Validate(v) == nil
}

// TestShape_AcceptsOnlyWhatTheValidatorAccepts: a shape's yes is the full
// validator's yes, over every edge value and thousands of generated
// documents and their corruptions; and the shape does decide most of the
// valid ones, so the fast path is taken.
func TestShape_AcceptsOnlyWhatTheValidatorAccepts(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(7, 41))
	for _, raw := range shapeSchemas {
		s, err := CompileSchema("/spec_schema", json.RawMessage(raw))
		require.NoError(t, err, raw)
		require.True(t, s.fast, "%s: a schema of the checked keywords has a shape", raw)

		docs := append([]string{}, shapeValues...)
		for range 3000 {
			docs = append(docs, genShaped(r, 0))
		}
		accepted, valid := 0, 0
		for _, d := range docs {
			doc := []byte(d)
			lib := libraryAccepts(t, s, doc)
			if s.shape.accepts(doc) {
				accepted++
				if !lib {
					t.Errorf("schema %s: the shape accepts %s, the validator refuses it", raw, doc)
				}
			}
			if lib {
				valid++
			}
			bad := bytes.Clone(doc)
			const junk = "{}[],:\"\\ 0-.eE+atn\xff"
			bad[r.IntN(len(bad))] = junk[r.IntN(len(junk))]
			if s.shape.accepts(bad) && !libraryAccepts(t, s, bad) {
				t.Errorf("schema %s: the shape accepts %q, the validator refuses it", raw, bad)
			}
		}
		// What a shape leaves by design (escapes, exponents, 1.0 as an
		// integer, 19 digits) is a good part of the edge values.
		if valid > 0 && accepted*2 < valid {
			t.Errorf("schema %s: the shape decided only %d of %d valid documents", raw, accepted, valid)
		}
	}
}

// routeSpecSchema is the classic demo's route kind's spec schema, the one a
// bench run validates a million times.
const routeSpecSchema = `{
  "type": "object",
  "properties": {
    "team": {"type": "string"},
    "destination": {"type": "string", "pattern": "^[0-9.]+/[0-9]+$"},
    "vpc_id": {"type": "string"},
    "tgw_id": {"type": "string"},
    "sim": {
      "type": "object",
      "properties": {
        "latency_ms": {"type": "integer", "minimum": 0},
        "jitter_ms": {"type": "integer", "minimum": 0},
        "failure_rate": {"type": "number", "minimum": 0, "maximum": 1},
        "terminal_failure_rate": {"type": "number", "minimum": 0, "maximum": 1}
      },
      "additionalProperties": false
    }
  },
  "required": ["destination"],
  "additionalProperties": false
}`

// TestShape_TheClassicRouteSpecs: the route kind's schema has a shape, it
// accepts the specs the classic demo composes, and what it refuses the full
// validator words.
func TestShape_TheClassicRouteSpecs(t *testing.T) {
	t.Parallel()
	route := mustSchema(t, routeSpecSchema)
	require.True(t, route.fast)
	for _, spec := range []string{
		`{"team":"team-0001","destination":"10.1.0.0/16","vpc_id":"vpc-7","tgw_id":"tgw-1"}`,
		`{"destination":"0.0.0.0/0","sim":{"latency_ms":5,"jitter_ms":0,"failure_rate":0.25,"terminal_failure_rate":0}}`,
	} {
		require.True(t, route.shape.accepts([]byte(spec)), spec)
		require.NoError(t, route.Validate(json.RawMessage(spec)))
	}
	for _, spec := range []string{
		`{"team":"t"}`, `{"destination":"x"}`, `{"destination":"0.0.0.0/0","extra":1}`,
		`{"destination":"0.0.0.0/0","sim":{"failure_rate":1.5}}`, `{"destination":"0.0.0.0/0","sim":{"latency_ms":-1}}`,
	} {
		require.False(t, route.shape.accepts([]byte(spec)), spec)
		var se *SchemaError
		require.ErrorAs(t, route.Validate(json.RawMessage(spec)), &se, "the full validator words the violation")
	}
}

func mustSchema(tb testing.TB, raw string) *Schema {
	tb.Helper()
	s, err := CompileSchema("/spec_schema", json.RawMessage(raw))
	require.NoError(tb, err)
	return s
}

// TestShape_OtherKeywordsHaveNone: a keyword a shape does not check, or a
// bound it cannot compare exactly, leaves the schema to the full validator.
func TestShape_OtherKeywordsHaveNone(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		`{"$ref":"#/$defs/a","$defs":{"a":{"type":"string"}}}`,
		`{"allOf":[{"type":"string"}]}`, `{"anyOf":[{}]}`, `{"oneOf":[{}]}`, `{"not":{}}`,
		`{"if":{},"then":{}}`, `{"const":1}`, `{"enum":[1]}`, `{"enum":[{"a":1}]}`,
		`{"minProperties":1}`, `{"maxProperties":1}`, `{"patternProperties":{"a":{}}}`,
		`{"propertyNames":{}}`, `{"dependentRequired":{"a":["b"]}}`, `{"unevaluatedProperties":false}`,
		`{"uniqueItems":true}`, `{"prefixItems":[{}]}`, `{"contains":{}}`, `{"multipleOf":2}`,
		`{"minimum":0.5}`, `{"maximum":1e30}`, `{"properties":{"a":{"$ref":"#"}}}`,
		`{"properties":{"a":{"$id":"https://example.com/a","type":"string"}}}`,
		`{"type":"object","properties":{"deep":{"allOf":[{}]}}}`,
	} {
		s, err := CompileSchema("/spec_schema", json.RawMessage(raw))
		require.NoError(t, err, raw)
		require.False(t, s.fast, "%s has no shape", raw)
	}
}

// TestValidate_AValidSpecAllocatesNothing: a composed child's spec is
// checked off its bytes.
func TestValidate_AValidSpecAllocatesNothing(t *testing.T) { //nolint:paralleltest // AllocsPerRun
	route := mustSchema(t, routeSpecSchema)
	spec := json.RawMessage(`{"team":"team-0001","destination":"10.1.0.0/16","vpc_id":"vpc-7","tgw_id":"tgw-1"}`)
	allocs := testing.AllocsPerRun(100, func() {
		if err := route.Validate(spec); err != nil {
			t.Fatal(err)
		}
	})
	require.Zero(t, allocs)
}

// FuzzShape: for any schema and document, the shape accepts only what the
// full validator accepts.
func FuzzShape(f *testing.F) {
	for i, raw := range shapeSchemas {
		f.Add([]byte(raw), []byte(shapeValues[i%len(shapeValues)]))
	}
	f.Fuzz(func(t *testing.T, schema, doc []byte) {
		s, err := CompileSchema("/spec_schema", schema)
		if err != nil || s == nil || !s.fast {
			return
		}
		if s.shape.accepts(doc) && !libraryAccepts(t, s, doc) {
			t.Fatalf("schema %s: the shape accepts %q, the validator refuses it", schema, doc)
		}
	})
}

// BenchmarkValidateSpec: a composed child's spec validated by its shape and
// by the full validator.
func BenchmarkValidateSpec(b *testing.B) {
	s := mustSchema(b, routeSpecSchema)
	spec := json.RawMessage(`{"team":"team-0001","destination":"10.1.0.0/16","vpc_id":"vpc-7","tgw_id":"tgw-1"}`)
	b.Run("shape", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Validate(spec); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("full", func(b *testing.B) {
		full := *s
		full.fast = false
		b.ReportAllocs()
		for b.Loop() {
			if err := full.Validate(spec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
