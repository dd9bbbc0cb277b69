package manifest

import (
	"math/big"
	"reflect"
	"regexp"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// A shape is the part of a compiled schema that Validate checks straight
// off a document's bytes, with no decoding and no allocation: type,
// properties, required, additionalProperties, items, the length and item
// counts, pattern, integer bounds and enums of strings, booleans and null
// — the keywords kinds' specs are written with.
//
// A shape only ever says yes. A document it accepts is valid; anything
// else (a violation, or what it does not decide: an escape in a string, a
// number with an exponent, invalid UTF-8, deep nesting) goes on to the full
// validator, which decides and words the violations. A schema using any
// other keyword gets no shape at all.
//
// Validation runs on every composed child's spec, a thousand per
// composition. The full validator decodes the document into maps and walks
// them: about 860 bytes and 5 µs a child, a tenth of what the broker
// allocated in a run, nearly all for specs that are valid.
type shape struct {
	never    bool     // the false schema
	types    typeSet  // the types allowed; 0 = any
	fields   fieldSet // properties and required, by name
	required uint64   // the bits of fields' required names, all of which must appear
	closed   bool     // additionalProperties: false
	extra    *shape   // additionalProperties' schema; nil = anything
	items    *shape   // items; nil = anything
	minItems int      // -1 = unbounded, as are the others
	maxItems int      //
	minLen   int      // in code points, as JSON Schema counts
	maxLen   int      //
	pattern  *regexp.Regexp
	bounds   intBounds // minimum, maximum and the exclusive pair, all integers
	enum     []any     // strings, booleans and nil only; nil = no enum
}

// typeSet is a set of JSON Schema types.
type typeSet uint8

const (
	tNull typeSet = 1 << iota
	tBoolean
	tNumber
	tInteger
	tString
	tArray
	tObject
)

var typeNames = map[string]typeSet{
	"null": tNull, "boolean": tBoolean, "number": tNumber, "integer": tInteger,
	"string": tString, "array": tArray, "object": tObject,
}

type field struct {
	s        *shape // properties' schema for the name; nil = anything
	declared bool   // the name is in properties
	bit      uint64 // its bit in shape.required; 0 = not required
}

type fieldSet map[string]field

// intBounds are a number's bounds when every one is an integer; a nil
// bound is absent.
type intBounds struct {
	min, max, exMin, exMax *int64
}

// maxShapeDepth bounds the documents a shape walks; deeper ones go to the
// full validator.
const maxShapeDepth = 64

// shapeKeywords are the compiled schema's fields a shape checks, and
// inertKeywords those that do not constrain a document (annotations, and
// names that only a $ref would use). A schema with any other field set
// (a keyword added in a later version of the library included) has no shape.
var (
	shapeKeywords = setOf("Bool", "Types", "Enum", "Required", "Properties", "AdditionalProperties",
		"MinItems", "MaxItems", "Items2020", "MinLength", "MaxLength", "Pattern",
		"Minimum", "Maximum", "ExclusiveMinimum", "ExclusiveMaximum")
	inertKeywords = setOf("DraftVersion", "Location", "Anchor", "DynamicAnchor", "RecursiveAnchor",
		"Title", "Description", "Default", "Comment", "ReadOnly", "WriteOnly", "Examples", "Deprecated")
)

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// shapeOf is the shape of a compiled schema, or false when it uses a
// keyword a shape does not check. nil with true is the schema that accepts
// anything.
func shapeOf(js *jsonschema.Schema) (*shape, bool) {
	return shapeAt(js, js.DraftVersion, 0)
}

func shapeAt(js *jsonschema.Schema, draft, depth int) (*shape, bool) {
	if js == nil {
		return nil, true
	}
	if depth > maxShapeDepth || js.DraftVersion != draft || (depth > 0 && js.ID != "") {
		return nil, false
	}
	v := reflect.ValueOf(js).Elem()
	for i := range v.NumField() {
		f := v.Type().Field(i)
		if f.IsExported() && !shapeKeywords[f.Name] && !inertKeywords[f.Name] && !v.Field(i).IsZero() {
			return nil, false
		}
	}
	if js.Bool != nil {
		if *js.Bool {
			return nil, true
		}
		return &shape{never: true}, true
	}
	s := &shape{minItems: -1, maxItems: -1, minLen: -1, maxLen: -1}
	if js.Types != nil {
		for _, t := range js.Types.ToStrings() {
			s.types |= typeNames[t]
		}
	}
	if js.Enum != nil {
		s.enum = make([]any, 0, len(js.Enum.Values))
		for _, e := range js.Enum.Values {
			switch e.(type) {
			case string, bool, nil:
				s.enum = append(s.enum, e)
			default:
				return nil, false
			}
		}
	}
	if !s.object(js, draft, depth) || !s.array(js, draft, depth) || !s.scalars(js) {
		return nil, false
	}
	return s, true
}

func (s *shape) object(js *jsonschema.Schema, draft, depth int) bool {
	if len(js.Required) > 64 {
		return false
	}
	s.fields = make(fieldSet, len(js.Properties)+len(js.Required))
	for name, p := range js.Properties {
		ps, ok := shapeAt(p, draft, depth+1)
		if !ok {
			return false
		}
		s.fields[name] = field{s: ps, declared: true}
	}
	next := uint(0)
	for _, name := range js.Required {
		f := s.fields[name]
		if f.bit == 0 {
			f.bit = 1 << next
			next++
			s.required |= f.bit
		}
		s.fields[name] = f
	}
	switch a := js.AdditionalProperties.(type) {
	case nil:
	case bool:
		s.closed = !a
	case *jsonschema.Schema:
		extra, ok := shapeAt(a, draft, depth+1)
		if !ok {
			return false
		}
		s.extra = extra
	default:
		return false
	}
	return true
}

func (s *shape) array(js *jsonschema.Schema, draft, depth int) bool {
	items, ok := shapeAt(js.Items2020, draft, depth+1)
	if !ok {
		return false
	}
	s.items = items
	s.minItems, s.maxItems = orUnbounded(js.MinItems), orUnbounded(js.MaxItems)
	return true
}

func (s *shape) scalars(js *jsonschema.Schema) bool {
	s.minLen, s.maxLen = orUnbounded(js.MinLength), orUnbounded(js.MaxLength)
	if js.Pattern != nil {
		re, ok := js.Pattern.(*regexp.Regexp) // the library's default engine
		if !ok {
			return false
		}
		s.pattern = re
	}
	for _, b := range []struct {
		r  *big.Rat
		to **int64
	}{{js.Minimum, &s.bounds.min}, {js.Maximum, &s.bounds.max}, {js.ExclusiveMinimum, &s.bounds.exMin}, {js.ExclusiveMaximum, &s.bounds.exMax}} {
		if b.r == nil {
			continue
		}
		if !b.r.IsInt() || !b.r.Num().IsInt64() {
			return false
		}
		n := b.r.Num().Int64()
		*b.to = &n
	}
	return true
}

func orUnbounded(n *int) int {
	if n == nil {
		return -1
	}
	return *n
}

// accepts reports whether doc certainly satisfies the shape; false leaves
// it to the full validator.
func (s *shape) accepts(doc []byte) bool {
	c := checker{simpleDecoder{b: doc}}
	if !c.value(s, 0) {
		return false
	}
	c.space()
	return c.i == len(c.b)
}

// checker walks a document's bytes against a shape. It reads them as
// decodeSimple does, and shares its whitespace and separator scanning.
type checker struct{ simpleDecoder }

// value checks the value at c.i against s (nil: anything).
func (c *checker) value(s *shape, depth int) bool {
	c.space()
	if c.i >= len(c.b) || depth > maxShapeDepth || (s != nil && s.never) {
		return false
	}
	switch ch := c.b[c.i]; {
	case ch == '{':
		return s.allows(tObject) && c.object(s, depth)
	case ch == '[':
		return s.allows(tArray) && c.array(s, depth)
	case ch == '"':
		str, ok := c.str()
		return ok && s.allows(tString) && s.text(str)
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number(s)
	default:
		return c.literal(s)
	}
}

// allows reports whether the type is allowed (a nil shape allows all).
func (s *shape) allows(t typeSet) bool {
	return s == nil || s.types == 0 || s.types&t != 0
}

func (c *checker) object(s *shape, depth int) bool {
	c.i++ // {
	var seen uint64
	c.space()
	if c.i < len(c.b) && c.b[c.i] == '}' {
		c.i++
		return s == nil || (s.enum == nil && s.required == 0)
	}
	for {
		c.space()
		if c.i >= len(c.b) || c.b[c.i] != '"' {
			return false
		}
		key, ok := c.str()
		if !ok {
			return false
		}
		c.space()
		if c.i >= len(c.b) || c.b[c.i] != ':' {
			return false
		}
		c.i++
		var vs *shape
		if s != nil {
			f, ok := s.fields[string(key)]
			seen |= f.bit
			switch {
			case ok && f.declared:
				vs = f.s
			case s.closed:
				return false
			default:
				vs = s.extra
			}
		}
		if !c.value(vs, depth+1) {
			return false
		}
		if done, ok := c.after('}'); !ok {
			return false
		} else if done {
			return s == nil || (s.enum == nil && seen == s.required)
		}
	}
}

func (c *checker) array(s *shape, depth int) bool {
	c.i++ // [
	var items *shape
	if s != nil {
		items = s.items
	}
	n := 0
	c.space()
	if c.i < len(c.b) && c.b[c.i] == ']' {
		c.i++
	} else {
		for done := false; !done; n++ {
			if !c.value(items, depth+1) {
				return false
			}
			var ok bool
			if done, ok = c.after(']'); !ok {
				return false
			}
		}
	}
	return s == nil || (s.enum == nil && within(n, s.minItems, s.maxItems))
}

func within(n, lo, hi int) bool { return (lo < 0 || n >= lo) && (hi < 0 || n <= hi) }

// str reads a string with no escapes and valid UTF-8, returning its bytes
// (which are then its text).
func (c *checker) str() ([]byte, bool) {
	c.i++ // "
	start, ascii := c.i, true
	for c.i < len(c.b) {
		switch ch := c.b[c.i]; {
		case ch == '"':
			s := c.b[start:c.i]
			c.i++
			return s, ascii || utf8.Valid(s)
		case ch == '\\' || ch < 0x20:
			return nil, false
		case ch >= utf8.RuneSelf:
			ascii = false
		}
		c.i++
	}
	return nil, false
}

// text checks a string's length, pattern and enum.
func (s *shape) text(str []byte) bool {
	if s == nil {
		return true
	}
	if s.minLen >= 0 || s.maxLen >= 0 {
		if !within(utf8.RuneCount(str), s.minLen, s.maxLen) {
			return false
		}
	}
	if s.pattern != nil && !s.pattern.Match(str) {
		return false
	}
	if s.enum != nil {
		for _, e := range s.enum {
			if es, ok := e.(string); ok && es == string(str) {
				return true
			}
		}
		return false
	}
	return true
}

// number checks a number. It decides integers of up to 18 digits and
// decimals without an exponent against integer bounds; anything else is
// left to the full validator.
func (c *checker) number(s *shape) bool {
	neg := c.b[c.i] == '-'
	if neg {
		c.i++
	}
	var whole int64
	switch {
	case c.i < len(c.b) && c.b[c.i] == '0':
		c.i++
	default:
		digits := 0
		for c.i < len(c.b) && c.b[c.i] >= '0' && c.b[c.i] <= '9' {
			whole = whole*10 + int64(c.b[c.i]-'0')
			c.i++
			digits++
			if digits > 18 {
				return false
			}
		}
		if digits == 0 {
			return false
		}
	}
	point, fraction := false, false
	if c.i < len(c.b) && c.b[c.i] == '.' {
		c.i++
		point = true
		n := 0
		for ; c.i < len(c.b) && c.b[c.i] >= '0' && c.b[c.i] <= '9'; c.i++ {
			fraction = fraction || c.b[c.i] != '0'
			n++
		}
		if n == 0 {
			return false
		}
	}
	if c.i < len(c.b) && (c.b[c.i] == 'e' || c.b[c.i] == 'E') {
		return false
	}
	if s == nil {
		return true
	}
	typed := s.allows(tNumber) || (!point && s.allows(tInteger))
	if s.enum != nil || !typed {
		return false
	}
	// For an integer bound m: x >= m iff floor(x) >= m, x > m iff ceil(x) > m,
	// x <= m iff ceil(x) <= m, x < m iff floor(x) < m.
	floor, ceil := whole, whole
	if fraction {
		ceil++
	}
	if neg {
		floor, ceil = -ceil, -floor
	}
	b := s.bounds
	return (b.min == nil || floor >= *b.min) && (b.exMin == nil || ceil > *b.exMin) &&
		(b.max == nil || ceil <= *b.max) && (b.exMax == nil || floor < *b.exMax)
}

func (c *checker) literal(s *shape) bool {
	for _, l := range [...]struct {
		text string
		t    typeSet
		v    any
	}{{"true", tBoolean, true}, {"false", tBoolean, false}, {"null", tNull, nil}} {
		if len(c.b)-c.i >= len(l.text) && string(c.b[c.i:c.i+len(l.text)]) == l.text {
			c.i += len(l.text)
			if !s.allows(l.t) {
				return false
			}
			if s == nil || s.enum == nil {
				return true
			}
			for _, e := range s.enum {
				if e == l.v {
					return true
				}
			}
			return false
		}
	}
	return false
}
