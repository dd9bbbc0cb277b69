package manifest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/manifest"
)

const vpcSpecSchema = `{
	"$schema": "https://json-schema.org/draft/2020-12/schema",
	"type": "object",
	"properties": {
		"cidr":    {"type": "string", "pattern": "^[0-9./]+$"},
		"subnets": {"type": "integer", "minimum": 1},
		"tier":    {"enum": ["dev", "prod"]},
		"tags":    {"type": "array", "items": {"type": "string"}},
		"dns":     {"$ref": "#/$defs/dns"}
	},
	"required": ["cidr"],
	"additionalProperties": false,
	"$defs": {
		"dns": {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
	}
}`

func TestSchemaValidate(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason  string
		schema  string
		doc     string
		want    []manifest.Violation
		wantErr string
	}{
		"Valid": {
			reason: "a conforming document has no violations",
			schema: vpcSpecSchema,
			doc:    `{"cidr": "10.0.0.0/16", "subnets": 3, "tier": "prod", "tags": ["a"], "dns": {"zone": "x."}}`,
		},
		"Type": {
			reason:  "a wrong type points at the value",
			schema:  vpcSpecSchema,
			doc:     `{"cidr": 10}`,
			want:    []manifest.Violation{{Pointer: "/cidr", Rule: "type", Message: "expected string, but got number"}},
			wantErr: "spec/cidr: expected string, but got number [type]",
		},
		"RequiredPointsAtMissingProperty": {
			reason:  "a missing required property is reported at its own pointer, not at the parent",
			schema:  vpcSpecSchema,
			doc:     `{}`,
			want:    []manifest.Violation{{Pointer: "/cidr", Rule: "required", Message: `missing required property "cidr"`}},
			wantErr: `spec/cidr: missing required property "cidr" [required]`,
		},
		"RequiredNested": {
			reason: "a nested required violation, reached through $ref, points at the nested property",
			schema: vpcSpecSchema,
			doc:    `{"cidr": "10.0.0.0/16", "dns": {}}`,
			want:   []manifest.Violation{{Pointer: "/dns/zone", Rule: "required", Message: `missing required property "zone"`}},
		},
		"AdditionalProperties": {
			reason: "each property that is not allowed is its own violation, pointer escaped per RFC 6901",
			schema: vpcSpecSchema,
			doc:    `{"cidr": "10.0.0.0/16", "zone": "x", "a/b": 1}`,
			want: []manifest.Violation{
				{Pointer: "/a~1b", Rule: "additionalProperties", Message: `property "a/b" is not allowed`},
				{Pointer: "/zone", Rule: "additionalProperties", Message: `property "zone" is not allowed`},
			},
			wantErr: `spec/a~1b: property "a/b" is not allowed [additionalProperties] (and 1 more)`,
		},
		"SeveralSortedByPointer": {
			reason: "all violations are reported, sorted by pointer",
			schema: vpcSpecSchema,
			doc:    `{"subnets": 0, "tier": "qa", "tags": ["ok", 7], "cidr": "ten"}`,
			want: []manifest.Violation{
				{Pointer: "/cidr", Rule: "pattern", Message: "'ten' does not match pattern '^[0-9./]+$'"},
				{Pointer: "/subnets", Rule: "minimum", Message: "must be at least 1, got 0"},
				{Pointer: "/tags/1", Rule: "type", Message: "expected string, but got number"},
				{Pointer: "/tier", Rule: "enum", Message: "value must be one of 'dev', 'prod'"},
			},
		},
		"RootType": {
			reason:  "a violation of the document itself has the empty pointer",
			schema:  vpcSpecSchema,
			doc:     `[]`,
			want:    []manifest.Violation{{Pointer: "", Rule: "type", Message: "expected object, but got array"}},
			wantErr: "spec: expected object, but got array [type]",
		},
		"EmptyDocIsNull": {
			reason: "an empty document is JSON null",
			schema: vpcSpecSchema,
			doc:    ``,
			want:   []manifest.Violation{{Pointer: "", Rule: "type", Message: "expected object, but got null"}},
		},
		"OneOf": {
			reason: "a failed oneOf is one violation of the keyword, explained by its alternatives",
			schema: `{"oneOf": [{"type": "string"}, {"type": "integer"}]}`,
			doc:    `true`,
			want: []manifest.Violation{{Pointer: "", Rule: "oneOf",
				Message: "'oneOf' failed, none matched (expected integer, but got boolean; expected string, but got boolean)"}},
		},
		"FalseSchema": {
			reason: "the false schema rejects everything",
			schema: `false`,
			doc:    `{}`,
			want:   []manifest.Violation{{Pointer: "", Rule: "false", Message: "no value is allowed here (false schema)"}},
		},
		"DependentRequired": {
			reason: "dependentRequired points at the missing property too",
			schema: `{"dependentRequired": {"a": ["b"]}}`,
			doc:    `{"a": 1}`,
			want: []manifest.Violation{{Pointer: "/b", Rule: "dependentRequired",
				Message: `missing property "b", required when "a" is present`}},
		},
		"BigNumbersExact": {
			reason: "numbers are compared exactly, without float rounding",
			schema: `{"maximum": 9007199254740992}`,
			doc:    `9007199254740993`,
			want:   []manifest.Violation{{Pointer: "", Rule: "maximum", Message: "must be at most 9007199254740992, got 9007199254740993"}},
		},
		"DecimalBound": {
			reason: "decimal bounds print exactly",
			schema: `{"exclusiveMinimum": 0.125, "multipleOf": 0.05}`,
			doc:    `0.12`,
			want: []manifest.Violation{
				{Pointer: "", Rule: "exclusiveMinimum", Message: "must be greater than 0.125, got 0.12"},
				{Pointer: "", Rule: "multipleOf", Message: "must be a multiple of 0.05, got 0.12"},
			},
		},
		"FormatIsAnnotation": {
			reason: "draft 2020-12: format is an annotation, not an assertion",
			schema: `{"type": "string", "format": "email"}`,
			doc:    `"not an email"`,
		},
		"SchemaKeywordIgnored": {
			reason: "$schema is ignored: a draft-04 URL still compiles as 2020-12 (const exists there)",
			schema: `{"$schema": "http://json-schema.org/draft-04/schema#", "const": 1}`,
			doc:    `2`,
			want:   []manifest.Violation{{Pointer: "", Rule: "const", Message: "value must be 1"}},
		},
		"Malformed": {
			reason: "a document that is not JSON is a violation of its own",
			schema: `true`,
			doc:    `{"a":`,
			want:   []manifest.Violation{{Pointer: "", Rule: "malformed", Message: "not JSON: unexpected EOF"}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := manifest.CompileSchema("/spec_schema", json.RawMessage(tc.schema))
			require.NoError(t, err)
			require.NotNil(t, s)
			err = s.Validate(json.RawMessage(tc.doc))
			if tc.want == nil {
				require.NoError(t, err, tc.reason)
				return
			}
			var se *manifest.SchemaError
			require.ErrorAs(t, err, &se, tc.reason)
			if diff := cmp.Diff(tc.want, se.Violations); diff != "" {
				t.Errorf("%s\nviolations: -want +got:\n%s", tc.reason, diff)
			}
			if tc.wantErr != "" {
				if diff := cmp.Diff(tc.wantErr, err.Error()); diff != "" {
					t.Errorf("%s\nError(): -want +got:\n%s", tc.reason, diff)
				}
			}
		})
	}
}

func TestCompileSchema(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason      string
		pointer     string
		raw         string
		wantNil     bool
		wantErr     *manifest.ValidationError // Message compared only when set
		wantSubject string
	}{
		"Nil":   {reason: "an absent schema is untyped", pointer: "/spec_schema", raw: "", wantNil: true},
		"Null":  {reason: "a null schema is untyped", pointer: "/spec_schema", raw: " null ", wantNil: true},
		"True":  {reason: "true is a schema", pointer: "/config_schema", raw: "true", wantSubject: "config"},
		"Typed": {reason: "an object schema compiles", pointer: "/status_schema", raw: `{"type":"object"}`, wantSubject: "status"},
		"BadKeyword": {
			reason:  "a keyword with a wrong value fails against the metaschema, at the schema's pointer",
			pointer: "/spec_schema", raw: `{"type": 5}`,
			wantErr: &manifest.ValidationError{Pointer: "/spec_schema", Rule: manifest.RuleSchemaInvalid},
		},
		"BadRegex": {
			reason:  "a pattern must compile",
			pointer: "/config_schema", raw: `{"pattern": "("}`,
			wantErr: &manifest.ValidationError{Pointer: "/config_schema", Rule: manifest.RuleSchemaInvalid},
		},
		"DanglingRef": {
			reason:  "a local $ref must resolve",
			pointer: "/spec_schema", raw: `{"$ref": "#/$defs/missing"}`,
			wantErr: &manifest.ValidationError{Pointer: "/spec_schema", Rule: manifest.RuleSchemaInvalid},
		},
		"ExternalRef": {
			reason:  "a schema never loads files or URLs",
			pointer: "/spec_schema", raw: `{"$ref": "file:///etc/hostname"}`,
			wantErr: &manifest.ValidationError{Pointer: "/spec_schema", Rule: manifest.RuleSchemaInvalid},
		},
		"NotASchema": {
			reason:  "an array is not a schema",
			pointer: "/spec_schema", raw: `[1]`,
			wantErr: &manifest.ValidationError{Pointer: "/spec_schema", Rule: manifest.RuleSchemaInvalid,
				Message: "must be a JSON Schema object"},
		},
		"SelfRef": {
			reason:  "a schema that refers to itself in place would fail every document with a reference cycle",
			pointer: "/spec_schema", raw: `{"$ref": "#"}`,
			wantErr: &manifest.ValidationError{Pointer: "/spec_schema", Rule: manifest.RuleSchemaInvalid,
				Message: "not a valid JSON Schema: at /: a reference cycle: it applies itself at the same place in the document, for ever"},
		},
		"NestedRefCycle": {
			reason:  "a cycle of $defs through anyOf/allOf/not under a property has no meaning: the library fails a document that reaches it or, under a not, lets it through",
			pointer: "/spec_schema",
			raw: `{"type":"object","properties":{"tree":{"$ref":"#/$defs/a"}},
			       "$defs":{"a":{"anyOf":[{"type":"string"},{"allOf":[{"$ref":"#/$defs/b"}]}]},"b":{"not":{"$ref":"#/$defs/a"}}}}`,
			wantErr: &manifest.ValidationError{Pointer: "/spec_schema", Rule: manifest.RuleSchemaInvalid},
		},
		"Recursive": {
			reason:  "a recursive schema that descends into the document on each round is a tree, not a cycle",
			pointer: "/spec_schema",
			raw: `{"$ref":"#/$defs/node","$defs":{"node":{"type":"object","properties":{"children":{"type":"array","items":{"$ref":"#/$defs/node"}},
			       "next":{"anyOf":[{"type":"null"},{"$ref":"#/$defs/node"}]}}}}}`,
			wantSubject: "spec",
		},
		"NotJSON": {
			reason:  "bytes that are not JSON",
			pointer: "/spec_schema", raw: `{`,
			wantErr: &manifest.ValidationError{Pointer: "/spec_schema", Rule: manifest.RuleSchemaInvalid},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, err := manifest.CompileSchema(tc.pointer, json.RawMessage(tc.raw))
			if tc.wantErr != nil {
				var ve *manifest.ValidationError
				require.ErrorAs(t, err, &ve, tc.reason)
				got := *ve
				if tc.wantErr.Message == "" {
					got.Message = ""
				}
				if diff := cmp.Diff(*tc.wantErr, got); diff != "" {
					t.Errorf("%s\n-want +got:\n%s", tc.reason, diff)
				}
				require.NotContains(t, ve.Message, "converge:///", "no synthetic URLs leak into messages")
				return
			}
			require.NoError(t, err, tc.reason)
			if tc.wantNil {
				require.Nil(t, s, tc.reason)
				require.NoError(t, s.Validate(json.RawMessage(`{"anything": [1, 2]}`)), "a nil schema validates anything")
				return
			}
			require.NotNil(t, s, tc.reason)
			require.Equal(t, tc.pointer, s.Pointer())
			// The subject names the axis in validation errors.
			if err := s.Validate(json.RawMessage(`{`)); err != nil {
				var se *manifest.SchemaError
				require.ErrorAs(t, err, &se)
				require.Equal(t, tc.wantSubject, se.Subject)
			}
		})
	}
}

// TestSchemaValidate_Concurrent shares one compiled schema between
// goroutines; run with -race to check it is safe for concurrent use.
func TestSchemaValidate_Concurrent(t *testing.T) {
	t.Parallel()
	s, err := manifest.CompileSchema("/spec_schema", json.RawMessage(vpcSpecSchema))
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				good := json.RawMessage(fmt.Sprintf(`{"cidr": "10.%d.0.0/16", "subnets": %d}`, g, i+1))
				if err := s.Validate(good); err != nil {
					errs <- fmt.Errorf("goroutine %d, doc %d: %w", g, i, err)
					return
				}
				var se *manifest.SchemaError
				if err := s.Validate(json.RawMessage(`{"cidr": 1}`)); !errors.As(err, &se) || se.Violations[0].Pointer != "/cidr" {
					errs <- fmt.Errorf("goroutine %d, doc %d: want a /cidr violation, got %w", g, i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
