package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// jsonSchema is the part of JSON Schema (2020-12) the type generator reads.
type jsonSchema struct {
	Type                 schemaTypes            `json:"type"`
	Description          string                 `json:"description"`
	Properties           map[string]*jsonSchema `json:"properties"`
	Required             []string               `json:"required"`
	AdditionalProperties json.RawMessage        `json:"additionalProperties"`
	Items                *jsonSchema            `json:"items"`
	Enum                 []any                  `json:"enum"`
	Const                any                    `json:"const"`
	Ref                  string                 `json:"$ref"`
	Defs                 map[string]*jsonSchema `json:"$defs"`
	Definitions          map[string]*jsonSchema `json:"definitions"`
	OneOf                []*jsonSchema          `json:"oneOf"`
	AnyOf                []*jsonSchema          `json:"anyOf"`
	AllOf                []*jsonSchema          `json:"allOf"`
}

// schemaTypes is "type": one name or a list of them.
type schemaTypes []string

func (t *schemaTypes) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*t = schemaTypes{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return fmt.Errorf("type: want a type name or a list of them: %w", err)
	}
	*t = many
	return nil
}

// tref is a generated type expression.
type tref struct {
	prim     string // string, integer, number, boolean; "" for the others
	named    string // a generated named type
	elem     *tref  // array items or map values
	isArray  bool
	isMap    bool
	nullable bool
}

func (t tref) isAny() bool { return t.prim == "" && t.named == "" && !t.isArray && !t.isMap }

// namedType is a generated declaration: a struct, a string enum or an
// alias of another type expression.
type namedType struct {
	name   string
	doc    string
	fields []typeField
	enum   []string
	alias  *tref
	// isStruct: an object with properties (possibly none left after
	// filtering: still a struct).
	isStruct bool
}

type typeField struct {
	json     string
	doc      string
	t        tref
	required bool
}

// typeGen turns schemas into named types, in a deterministic order.
type typeGen struct {
	types []*namedType
	taken map[string]bool
	// defs are the schema's $defs/definitions, by JSON pointer, and the
	// named types made of them.
	defs    map[string]*jsonSchema
	defName map[string]string
}

func newTypeGen() *typeGen {
	return &typeGen{taken: map[string]bool{}, defs: map[string]*jsonSchema{}, defName: map[string]string{}}
}

// unique reserves a type name, suffixing a number on a collision.
func (g *typeGen) unique(name string) string {
	n := name
	for i := 2; g.taken[n]; i++ {
		n = name + strconv.Itoa(i)
	}
	g.taken[n] = true
	return n
}

// root generates the named type name for a whole schema (nil = untyped).
func (g *typeGen) root(name, what string, raw json.RawMessage) error {
	var s jsonSchema
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("the %s schema: %w", what, err)
		}
	}
	for prefix, defs := range map[string]map[string]*jsonSchema{"#/$defs/": s.Defs, "#/definitions/": s.Definitions} {
		for k, d := range defs {
			g.defs[prefix+k] = d
		}
	}
	t, err := g.resolve(&s, name, what)
	if err != nil {
		return err
	}
	if t.named == name {
		return nil
	}
	if t.isAny() {
		// An untyped spec or status is still a JSON object.
		t = tref{isMap: true, elem: &tref{}}
	}
	nt := &namedType{name: g.unique(name), alias: &t, doc: s.Description}
	g.types = append(g.types, nt)
	return nil
}

// resolve maps a schema to a type expression, declaring named types for
// objects with properties and string enums (named hint).
func (g *typeGen) resolve(s *jsonSchema, hint, at string) (tref, error) {
	if s == nil {
		return tref{}, nil
	}
	if s.Ref != "" {
		return g.ref(s.Ref, at)
	}
	types, nullable := nonNull(s.Type)
	var kind string
	switch {
	case len(types) == 1:
		kind = types[0]
	case len(types) > 1 || len(s.OneOf)+len(s.AnyOf)+len(s.AllOf) > 0:
		return tref{nullable: nullable}, nil
	case len(s.Properties) > 0 || len(s.AdditionalProperties) > 0:
		kind = "object"
	case s.Items != nil:
		kind = "array"
	case stringEnum(s.Enum) != nil:
		kind = "string"
	}
	var t tref
	var err error
	switch kind {
	case "object":
		t, err = g.object(s, hint, at)
	case "array":
		var elem tref
		elem, err = g.resolve(s.Items, hint+"Item", at+"[]")
		t = tref{isArray: true, elem: &elem}
	case "string":
		t = tref{prim: "string"}
		if values := stringEnum(s.Enum); values != nil {
			nt := &namedType{name: g.unique(hint), doc: s.Description, enum: values}
			g.types = append(g.types, nt)
			t = tref{named: nt.name}
		}
	case "integer", "number", "boolean":
		t = tref{prim: kind}
	case "", "null":
	default:
		return tref{}, fmt.Errorf("%s: unknown type %q", at, kind)
	}
	t.nullable = nullable
	return t, err
}

func (g *typeGen) ref(ref, at string) (tref, error) {
	if name, ok := g.defName[ref]; ok {
		return tref{named: name}, nil
	}
	d, ok := g.defs[ref]
	if !ok {
		return tref{}, fmt.Errorf("%s: $ref %q: only local #/$defs/NAME and #/definitions/NAME references are supported", at, ref)
	}
	// Reserve a free name and hand it to the definition's own declaration
	// (resolve claims hint first), so a recursive reference resolves to it.
	name := g.unique(pascal(ref[strings.LastIndex(ref, "/")+1:]))
	delete(g.taken, name)
	g.defName[ref] = name
	t, err := g.resolve(d, name, ref)
	if err != nil {
		return tref{}, err
	}
	if t.named != name {
		g.taken[name] = true
		g.types = append(g.types, &namedType{name: name, doc: d.Description, alias: &t})
	}
	return tref{named: g.defName[ref]}, nil
}

func (g *typeGen) object(s *jsonSchema, hint, at string) (tref, error) {
	var extra *jsonSchema
	if ap := bytes.TrimSpace(s.AdditionalProperties); len(ap) > 0 && ap[0] == '{' {
		extra = &jsonSchema{}
		if err := json.Unmarshal(ap, extra); err != nil {
			return tref{}, fmt.Errorf("%s: additionalProperties: %w", at, err)
		}
	}
	if len(s.Properties) == 0 {
		elem, err := g.resolve(extra, hint+"Value", at+".*")
		return tref{isMap: true, elem: &elem}, err
	}
	nt := &namedType{name: g.unique(hint), doc: s.Description, isStruct: true}
	g.types = append(g.types, nt)
	required := map[string]bool{}
	for _, r := range s.Required {
		required[r] = true
	}
	names := make([]string, 0, len(s.Properties))
	for k := range s.Properties {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		p := s.Properties[k]
		t, err := g.resolve(p, nt.name+pascal(k), at+"."+k)
		if err != nil {
			return tref{}, err
		}
		doc := ""
		if p != nil {
			doc = p.Description
		}
		nt.fields = append(nt.fields, typeField{json: k, doc: doc, t: t, required: required[k]})
	}
	return tref{named: nt.name}, nil
}

func nonNull(types schemaTypes) ([]string, bool) {
	var out []string
	nullable := false
	for _, t := range types {
		if t == "null" {
			nullable = true
			continue
		}
		out = append(out, t)
	}
	return out, nullable
}

func stringEnum(values []any) []string {
	if len(values) == 0 {
		return nil
	}
	out := make([]string, 0, len(values))
	for _, v := range values {
		s, ok := v.(string)
		if !ok {
			return nil
		}
		out = append(out, s)
	}
	return out
}

// initialisms are written in capitals in Go names.
var initialisms = map[string]bool{"id": true, "url": true, "uri": true, "api": true, "http": true, "https": true, "ip": true,
	"dns": true, "tls": true, "json": true, "cpu": true, "ttl": true, "uuid": true, "sql": true, "arn": true, "cidr": true, "tcp": true, "udp": true}

// pascal makes a Go/TypeScript type or field name of a JSON name:
// vpc_id → VpcID... words split on non-alphanumerics and case changes.
func pascal(s string) string {
	var words []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			words = append(words, string(cur))
			cur = nil
		}
	}
	runes := []rune(s)
	for i, r := range runes {
		switch {
		case !unicode.IsLetter(r) && !unicode.IsDigit(r):
			flush()
		case unicode.IsUpper(r) && i > 0 && unicode.IsLower(runes[i-1]):
			flush()
			cur = append(cur, r)
		default:
			cur = append(cur, r)
		}
	}
	flush()
	var b strings.Builder
	for _, w := range words {
		lw := strings.ToLower(w)
		switch {
		case initialisms[lw]:
			b.WriteString(strings.ToUpper(lw))
		default:
			rs := []rune(w)
			b.WriteString(string(unicode.ToUpper(rs[0])) + string(rs[1:]))
		}
	}
	out := b.String()
	if out == "" {
		return "Field"
	}
	if unicode.IsDigit([]rune(out)[0]) {
		out = "X" + out
	}
	return out
}
