package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is a compiled JSON Schema (draft 2020-12) for one axis of a kind:
// spec, status or config. A nil *Schema is untyped and validates anything.
// A Schema is immutable once compiled and safe for concurrent use.
type Schema struct {
	pointer  string // where the schema sits in its manifest, e.g. "/spec_schema"
	subject  string // what it validates, e.g. "spec" (names violations in errors)
	compiled *jsonschema.Schema
	shape    *shape // the fast check, when fast; nil then accepts anything
	fast     bool   // the schema uses only the keywords a shape checks
}

// Pointer is the JSON pointer of the schema inside its manifest.
func (s *Schema) Pointer() string {
	if s == nil {
		return ""
	}
	return s.pointer
}

// Violation is one way a document breaks a schema.
type Violation struct {
	// Pointer is the JSON pointer into the validated document ("" = the
	// document itself). A required (or dependentRequired) violation points
	// at the missing property, an additionalProperties violation at the
	// property that is not allowed.
	Pointer string
	// Rule is the JSON Schema keyword that failed: "type", "required",
	// "additionalProperties", "enum", … ("false" for a false schema, "not"
	// for not, "malformed" for a document that is not JSON).
	Rule    string
	Message string
}

// SchemaError is a document that does not satisfy its schema. Violations
// are sorted by pointer, then rule, then message, so the first is stable.
type SchemaError struct {
	// Subject names what was validated ("spec", "status", "config"); it
	// prefixes the pointer in Error. Empty for a schema compiled at "".
	Subject    string
	Violations []Violation
}

// Error names the first violation: "spec/cidr: expected string, but got
// number [type]", plus a count of the others.
func (e *SchemaError) Error() string {
	if len(e.Violations) == 0 {
		return e.Subject + ": invalid"
	}
	v := e.Violations[0]
	where := e.Subject + v.Pointer
	if where == "" {
		where = "/"
	}
	msg := fmt.Sprintf("%s: %s [%s]", where, v.Message, v.Rule)
	if n := len(e.Violations) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return msg
}

// draft is the one dialect manifests are written in; $schema is ignored.
var draft = jsonschema.Draft2020

// noLoader refuses every external reference: a manifest's schemas are
// self-contained (local "#/$defs/…" refs only), and compiling one must read
// neither the filesystem nor the network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema reference %q: manifests' schemas must be self-contained", url)
}

// CompileSchema compiles the JSON Schema raw found at pointer in a manifest
// (e.g. "/spec_schema"). Nil, empty or JSON null raw is an untyped axis: it
// returns a nil *Schema and no error. A top-level "$schema" is ignored: every
// schema is compiled as draft 2020-12 ("format" is an annotation, as that
// draft says). An invalid schema is a *ValidationError at pointer with rule
// "schema_invalid".
//
// Schema compilation is Go-only: validate_kind_manifest in Postgres only
// checks that each schema is an object, a boolean or null, because the DB
// cannot compile JSON Schema. Parse and the API therefore reject a manifest
// the CHECK alone would accept.
func CompileSchema(pointer string, raw json.RawMessage) (*Schema, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	invalid := func(format string, args ...any) error {
		return &ValidationError{Pointer: pointer, Message: fmt.Sprintf(format, args...), Rule: RuleSchemaInvalid}
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, invalid("not JSON: %v", err)
	}
	switch d := doc.(type) {
	case bool:
	case map[string]any:
		delete(d, "$schema")
	default:
		return nil, invalid("must be a JSON Schema object")
	}

	const loc = "converge:///manifest.json"
	c := jsonschema.NewCompiler()
	c.DefaultDraft(draft)
	c.UseLoader(noLoader{})
	if err := c.AddResource(loc, doc); err != nil {
		return nil, invalid("%v", err)
	}
	compiled, err := c.Compile(loc)
	if err != nil {
		return nil, invalid("%s", compileMessage(err))
	}
	if at, ok := refCycle(compiled); ok {
		return nil, invalid("not a valid JSON Schema: at %s: a reference cycle: it applies itself at the same place in the document, for ever", at)
	}
	sh, fast := shapeOf(compiled)
	return &Schema{pointer: pointer, subject: subjectOf(pointer), compiled: compiled, shape: sh, fast: fast}, nil
}

// refCycle finds a schema that reaches itself through keywords that apply
// at the same place in the document ($ref, allOf, anyOf, not, if, …). The
// library compiles it, then fails a document that gets there with a
// reference cycle (under a not or an anyOf, that failure can let it
// through): {"$ref": "#"} made a kind whose resources no spec satisfies,
// each refused as "reference cycle [invalid]". A recursion that descends into the document on the way
// (properties, items, …) is a tree, and fine. It returns the cycle's
// location in the schema ("/" for the root).
func refCycle(root *jsonschema.Schema) (string, bool) {
	const (
		active = iota + 1
		done
	)
	state := map[*jsonschema.Schema]int{}
	var inPlace func(s *jsonschema.Schema) (string, bool)
	inPlace = func(s *jsonschema.Schema) (string, bool) {
		switch state[s] {
		case active:
			return schemaPointer(s.Location), true
		case done:
			return "", false
		}
		state[s] = active
		for _, n := range samePlace(s) {
			if at, ok := inPlace(n); ok {
				return at, true
			}
		}
		state[s] = done
		return "", false
	}
	seen := map[*jsonschema.Schema]bool{}
	stack := []*jsonschema.Schema{root}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s == nil || seen[s] {
			continue
		}
		seen[s] = true
		if at, ok := inPlace(s); ok {
			return at, true
		}
		stack = append(append(stack, samePlace(s)...), deeper(s)...)
	}
	return "", false
}

// samePlace lists the subschemas s applies to the very value it validates.
func samePlace(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.Ref, s.RecursiveRef, s.Not, s.If, s.Then, s.Else}
	if s.DynamicRef != nil {
		out = append(out, s.DynamicRef.Ref)
	}
	out = append(append(append(out, s.AllOf...), s.AnyOf...), s.OneOf...)
	for _, d := range s.DependentSchemas {
		out = append(out, d)
	}
	for _, d := range s.Dependencies {
		if d, ok := d.(*jsonschema.Schema); ok {
			out = append(out, d)
		}
	}
	return slices.DeleteFunc(out, func(x *jsonschema.Schema) bool { return x == nil })
}

// deeper lists the subschemas s applies to values inside the one it
// validates (its properties, items, names, …).
func deeper(s *jsonschema.Schema) []*jsonschema.Schema {
	out := []*jsonschema.Schema{s.PropertyNames, s.UnevaluatedProperties, s.Contains, s.Items2020, s.UnevaluatedItems, s.ContentSchema}
	for _, p := range s.Properties {
		out = append(out, p)
	}
	for _, p := range s.PatternProperties {
		out = append(out, p)
	}
	out = append(out, s.PrefixItems...)
	for _, v := range []any{s.AdditionalProperties, s.AdditionalItems, s.Items} {
		switch v := v.(type) {
		case *jsonschema.Schema:
			out = append(out, v)
		case []*jsonschema.Schema:
			out = append(out, v...)
		}
	}
	return out
}

// schemaPointer is the JSON pointer, in the manifest's schema, of a
// compiled schema's location ("converge:///manifest.json#/$defs/a" →
// "/$defs/a").
func schemaPointer(loc string) string {
	if i := strings.IndexByte(loc, '#'); i >= 0 {
		loc = loc[i+1:]
	}
	if loc == "" {
		return "/"
	}
	return loc
}

// subjectOf names what a schema at pointer validates: "/spec_schema" →
// "spec".
func subjectOf(pointer string) string {
	last := pointer[strings.LastIndexByte(pointer, '/')+1:]
	return strings.TrimSuffix(unescapePointerToken(last), "_schema")
}

// compileMessage renders a compile error without the library's synthetic
// URLs: a metaschema violation as "<pointer in the schema>: <message>".
func compileMessage(err error) string {
	var sve *jsonschema.SchemaValidationError
	var ve *jsonschema.ValidationError
	if errors.As(err, &sve) && errors.As(sve.Err, &ve) {
		vs := violations(ve)
		if len(vs) > 0 {
			v := vs[0]
			where := v.Pointer
			if where == "" {
				where = "/"
			}
			return fmt.Sprintf("not a valid JSON Schema: at %s: %s", where, v.Message)
		}
	}
	return strings.ReplaceAll(err.Error(), "converge:///manifest.json", "schema")
}

// Validate checks doc against the schema. A nil schema accepts anything.
// Nil or empty doc is JSON null. A violation is a *SchemaError.
func (s *Schema) Validate(doc json.RawMessage) error {
	if s == nil {
		return nil
	}
	doc = bytes.TrimSpace(doc)
	if len(doc) == 0 {
		doc = json.RawMessage("null")
	}
	if s.fast && s.shape.accepts(doc) {
		return nil
	}
	v, ok := decodeSimple(doc)
	if !ok {
		var err error
		if v, err = jsonschema.UnmarshalJSON(bytes.NewReader(doc)); err != nil {
			return &SchemaError{Subject: s.subject, Violations: []Violation{{
				Pointer: "", Rule: "malformed", Message: fmt.Sprintf("not JSON: %v", err),
			}}}
		}
	}
	err := s.compiled.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("validate %s: %w", s.subject, err)
	}
	return &SchemaError{Subject: s.subject, Violations: violations(ve)}
}

// printer renders the library's messages in English.
var printer = message.NewPrinter(language.English)

// violations flattens a validation error tree into its leaves, the failures
// a person can act on, sorted for a stable first violation.
func violations(root *jsonschema.ValidationError) []Violation {
	var out []Violation
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		switch e.ErrorKind.(type) {
		case *kind.AnyOf, *kind.OneOf:
			// The alternatives' failures only make sense together: report
			// the keyword that failed, with them as its explanation.
			out = append(out, alternatives(e))
			return
		}
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		out = append(out, leafViolations(e)...)
	}
	walk(root)
	slices.SortFunc(out, func(a, b Violation) int {
		if c := strings.Compare(a.Pointer, b.Pointer); c != 0 {
			return c
		}
		if c := strings.Compare(a.Rule, b.Rule); c != 0 {
			return c
		}
		return strings.Compare(a.Message, b.Message)
	})
	return slices.Compact(out)
}

// alternatives renders a failed anyOf/oneOf as one violation whose message
// lists why each alternative failed.
func alternatives(e *jsonschema.ValidationError) Violation {
	at := pointerOf(e.InstanceLocation)
	msg := e.ErrorKind.LocalizedString(printer)
	if len(e.Causes) > 0 {
		var why []string
		for _, v := range violations(&jsonschema.ValidationError{Causes: e.Causes}) {
			if v.Pointer != at {
				why = append(why, v.Pointer+": "+v.Message)
			} else {
				why = append(why, v.Message)
			}
		}
		msg += " (" + strings.Join(why, "; ") + ")"
	}
	return Violation{Pointer: at, Rule: e.ErrorKind.KeywordPath()[0], Message: msg}
}

func leafViolations(e *jsonschema.ValidationError) []Violation {
	at := pointerOf(e.InstanceLocation)
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		return perProperty(at, "required", k.Missing, "missing required property %q")
	case *kind.DependentRequired:
		return perProperty(at, "dependentRequired", k.Missing,
			"missing property %q, required when "+fmt.Sprintf("%q", k.Prop)+" is present")
	case *kind.Dependency:
		return perProperty(at, "dependencies", k.Missing,
			"missing property %q, required when "+fmt.Sprintf("%q", k.Prop)+" is present")
	case *kind.AdditionalProperties:
		return perProperty(at, "additionalProperties", k.Properties, "property %q is not allowed")
	case *kind.Type:
		return []Violation{{Pointer: at, Rule: "type",
			Message: fmt.Sprintf("expected %s, but got %s", strings.Join(k.Want, " or "), k.Got)}}
	case *kind.Minimum:
		return numeric(at, "minimum", "must be at least %s, got %s", k.Want, k.Got)
	case *kind.Maximum:
		return numeric(at, "maximum", "must be at most %s, got %s", k.Want, k.Got)
	case *kind.ExclusiveMinimum:
		return numeric(at, "exclusiveMinimum", "must be greater than %s, got %s", k.Want, k.Got)
	case *kind.ExclusiveMaximum:
		return numeric(at, "exclusiveMaximum", "must be less than %s, got %s", k.Want, k.Got)
	case *kind.MultipleOf:
		return numeric(at, "multipleOf", "must be a multiple of %s, got %s", k.Want, k.Got)
	case *kind.FalseSchema:
		return []Violation{{Pointer: at, Rule: "false", Message: "no value is allowed here (false schema)"}}
	case *kind.Not:
		return []Violation{{Pointer: at, Rule: "not", Message: "must not match the 'not' schema"}}
	}
	rule := "invalid"
	if kp := e.ErrorKind.KeywordPath(); len(kp) > 0 {
		rule = kp[0]
	}
	return []Violation{{Pointer: at, Rule: rule, Message: e.ErrorKind.LocalizedString(printer)}}
}

// numeric renders a numeric keyword's bound and value exactly, as decimals.
func numeric(at, rule, format string, want, got *big.Rat) []Violation {
	return []Violation{{Pointer: at, Rule: rule, Message: fmt.Sprintf(format, decimal(want), decimal(got))}}
}

// decimal prints r (a JSON number, so a finite decimal) exactly.
func decimal(r *big.Rat) string {
	if r.IsInt() {
		return r.Num().String()
	}
	// The denominator is 2^a·5^b; max(a, b) fraction digits are exact.
	d := new(big.Int).Set(r.Denom())
	digits := 0
	ten, two, five, rem := big.NewInt(10), big.NewInt(2), big.NewInt(5), new(big.Int)
	for d.Cmp(big.NewInt(1)) > 0 && digits < 1000 {
		switch {
		case rem.Mod(d, ten).Sign() == 0:
			d.Div(d, ten)
		case rem.Mod(d, two).Sign() == 0:
			d.Div(d, two)
		case rem.Mod(d, five).Sign() == 0:
			d.Div(d, five)
		default:
			return r.FloatString(20) // not a finite decimal: cannot come from JSON
		}
		digits++
	}
	return r.FloatString(digits)
}

// perProperty splits a keyword that names several properties into one
// violation per property, each pointing at that property.
func perProperty(at, rule string, props []string, format string) []Violation {
	out := make([]Violation, 0, len(props))
	for _, p := range props {
		out = append(out, Violation{Pointer: at + "/" + escapePointerToken(p), Rule: rule, Message: fmt.Sprintf(format, p)})
	}
	return out
}

func pointerOf(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(escapePointerToken(t))
	}
	return b.String()
}

// escapePointerToken escapes one RFC 6901 reference token.
func escapePointerToken(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
}

func unescapePointerToken(t string) string {
	return strings.ReplaceAll(strings.ReplaceAll(t, "~1", "/"), "~0", "~")
}
