package pipeline

import (
	"encoding/json"
	"slices"
	"strconv"
	"unicode/utf8"
)

// decodeLabels reads a resource's labels, a jsonb object of strings as
// Postgres prints it ({"k": "v", …}). Every claimed task carries them, and
// encoding/json's reflection was 3% of the broker's CPU on the claim path,
// so the printed form is read directly; anything else it does not expect
// (escapes aside, which strconv reads) is left to encoding/json, which also
// gives the error. An empty object is a nil map.
func decodeLabels(b []byte) (map[string]string, error) {
	if m, ok := scanLabels(b); ok {
		return m, nil
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	return m, nil
}

// scanLabels reads {"k": "v", …} with optional spaces; ok is false for
// any other input.
func scanLabels(b []byte) (m map[string]string, ok bool) {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil, skipSpace(b, i+1) == len(b)
	}
	for {
		var k, v string
		if k, i, ok = scanString(b, i); !ok {
			return nil, false
		}
		if i = skipSpace(b, i); i >= len(b) || b[i] != ':' {
			return nil, false
		}
		if v, i, ok = scanString(b, skipSpace(b, i+1)); !ok {
			return nil, false
		}
		if m == nil {
			m = make(map[string]string, 4)
		}
		m[k] = v
		if i = skipSpace(b, i); i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return m, skipSpace(b, i+1) == len(b)
		default:
			return nil, false
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString reads a JSON string at b[i]; one with escapes or control
// characters goes through strconv.Unquote, and one it would read otherwise
// than JSON (\x, \', \U…) is refused.
func scanString(b []byte, i int) (s string, next int, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return "", i, false
	}
	plain := true
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '"':
			if plain {
				// encoding/json would replace invalid UTF-8: leave it that
				// (Postgres never prints it)
				return string(b[i+1 : j]), j + 1, utf8.Valid(b[i+1 : j])
			}
			s, err := strconv.Unquote(string(b[i : j+1]))
			return s, j + 1, err == nil
		case c == '\\':
			if j+1 >= len(b) || !jsonEscape(b[j+1]) {
				return "", i, false
			}
			plain = false
			j++
		case c < 0x20:
			return "", i, false
		}
	}
	return "", i, false
}

// jsonEscape reports whether \c is one of JSON's escapes (strconv.Unquote
// reads them the same way; \u's surrogate pairs too).
func jsonEscape(c byte) bool {
	switch c {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't', 'u':
		return true
	}
	return false
}

// encodeLabels is a child's labels as a JSON object, keys sorted (what
// json.Marshal writes, for the label characters a resource may carry);
// a key or value with any other byte goes through json.Marshal. A compose
// encodes every child's labels, and json.Marshal's reflection was a third
// of planning its children.
func encodeLabels(labels map[string]string) []byte {
	if len(labels) == 0 {
		return []byte(`{}`)
	}
	keys := make([]string, 0, len(labels))
	n := 2
	for k, v := range labels {
		if !plainJSON(k) || !plainJSON(v) {
			b, _ := json.Marshal(labels) // a map[string]string always marshals
			return b
		}
		keys = append(keys, k)
		n += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, k...)
		b = append(b, `":"`...)
		b = append(b, labels[k]...)
		b = append(b, '"')
	}
	return append(b, '}')
}

// plainJSON reports whether s needs no escaping in a JSON string, as
// json.Marshal writes it: printable ASCII other than the quote, the
// backslash and the HTML characters it escapes.
func plainJSON(s string) bool {
	for i := range len(s) {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}
