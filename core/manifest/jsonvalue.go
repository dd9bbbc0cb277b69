package manifest

import (
	"encoding/json"
	"unicode/utf8"
)

// decodeSimple decodes doc into the values the validator takes (the same
// values as encoding/json with UseNumber: map[string]any, []any, string,
// json.Number, bool, nil) when doc is plain JSON: strings without \u
// escapes or invalid UTF-8, nesting no deeper than maxDepth. For anything
// else, malformed input included, it reports false and the caller decodes
// with encoding/json, which also words the error.
//
// Validation decodes every composed child's spec, a thousand per
// composition; encoding/json's Decoder (a buffered copy of the input, a
// second scan to find the value's end, UseNumber) was about half of the
// validation's cost. This is one pass over the bytes.
func decodeSimple(doc []byte) (any, bool) {
	d := simpleDecoder{b: doc}
	v, ok := d.value(0)
	if !ok {
		return nil, false
	}
	d.space()
	return v, d.i == len(d.b)
}

// maxDepth bounds decodeSimple's recursion; deeper documents go to
// encoding/json (whose own bound is 10,000).
const maxDepth = 512

type simpleDecoder struct {
	b []byte
	i int
}

func (d *simpleDecoder) space() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *simpleDecoder) value(depth int) (any, bool) {
	d.space()
	if d.i >= len(d.b) || depth > maxDepth {
		return nil, false
	}
	switch c := d.b[d.i]; {
	case c == '{':
		return d.object(depth)
	case c == '[':
		return d.array(depth)
	case c == '"':
		if s, ok := d.str(); ok {
			return s, true
		}
		return nil, false
	case c == '-' || (c >= '0' && c <= '9'):
		return d.number()
	default:
		return d.literal()
	}
}

func (d *simpleDecoder) object(depth int) (any, bool) {
	d.i++ // {
	m := map[string]any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == '}' {
		d.i++
		return m, true
	}
	for {
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != '"' {
			return nil, false
		}
		k, ok := d.str()
		if !ok {
			return nil, false
		}
		d.space()
		if d.i >= len(d.b) || d.b[d.i] != ':' {
			return nil, false
		}
		d.i++
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		m[k] = v // a repeated key: the last one wins, as in encoding/json
		if done, ok := d.after('}'); !ok || done {
			return m, ok
		}
	}
}

func (d *simpleDecoder) array(depth int) (any, bool) {
	d.i++ // [
	a := []any{}
	d.space()
	if d.i < len(d.b) && d.b[d.i] == ']' {
		d.i++
		return a, true
	}
	for {
		v, ok := d.value(depth + 1)
		if !ok {
			return nil, false
		}
		a = append(a, v)
		if done, ok := d.after(']'); !ok || done {
			return a, ok
		}
	}
}

// after reads what follows a member: a comma (more follow) or the closing
// bracket (done); anything else is not ok.
func (d *simpleDecoder) after(closing byte) (done, ok bool) {
	d.space()
	if d.i >= len(d.b) {
		return false, false
	}
	switch d.b[d.i] {
	case ',':
		d.i++
		return false, true
	case closing:
		d.i++
		return true, true
	}
	return false, false
}

// str reads a string whose escapes, if any, are the one-character ones.
func (d *simpleDecoder) str() (string, bool) {
	d.i++ // "
	start, ascii := d.i, true
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			s := d.b[start:d.i]
			d.i++
			if !ascii && !utf8.Valid(s) {
				return "", false // encoding/json replaces invalid bytes
			}
			return string(s), true
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		d.i++
	}
	return "", false
}

// escaped finishes a string with an escape at d.i, its text from start.
func (d *simpleDecoder) escaped(start int) (string, bool) {
	out := append(make([]byte, 0, d.i-start+16), d.b[start:d.i]...)
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c != '\\':
			out = append(out, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.b) {
			return "", false
		}
		switch d.b[d.i+1] {
		case '"', '\\', '/':
			out = append(out, d.b[d.i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		default: // \u (surrogates, invalid code points) and malformed escapes
			return "", false
		}
		d.i += 2
	}
	return "", false
}

// number reads a JSON number as its literal text, as UseNumber does.
func (d *simpleDecoder) number() (any, bool) {
	start := d.i
	if d.b[d.i] == '-' {
		d.i++
	}
	switch {
	case d.i < len(d.b) && d.b[d.i] == '0':
		d.i++
	case d.digits() == 0:
		return nil, false
	}
	if d.i < len(d.b) && d.b[d.i] == '.' {
		d.i++
		if d.digits() == 0 {
			return nil, false
		}
	}
	if d.i < len(d.b) && (d.b[d.i] == 'e' || d.b[d.i] == 'E') {
		d.i++
		if d.i < len(d.b) && (d.b[d.i] == '+' || d.b[d.i] == '-') {
			d.i++
		}
		if d.digits() == 0 {
			return nil, false
		}
	}
	return json.Number(d.b[start:d.i]), true
}

func (d *simpleDecoder) digits() int {
	n := 0
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
		n++
	}
	return n
}

func (d *simpleDecoder) literal() (any, bool) {
	for _, l := range [...]struct {
		text string
		v    any
	}{{"true", true}, {"false", false}, {"null", nil}} {
		if len(d.b)-d.i >= len(l.text) && string(d.b[d.i:d.i+len(l.text)]) == l.text {
			d.i += len(l.text)
			return l.v, true
		}
	}
	return nil, false
}
