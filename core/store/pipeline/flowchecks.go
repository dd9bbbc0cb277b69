package pipeline

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
)

// flowCheck is one substituted spec to validate: an element of
// drain_value_flows' converge.value_flow_checks, [id, kind, version,
// manifest_gen, spec].
type flowCheck struct {
	id            uuid.UUID
	kind, version string
	gen           int64
	spec          []byte // the spec's JSON as Postgres printed it, a slice of the setting
}

// parseFlowChecks reads converge.value_flow_checks. The setting carries
// every substituted spec of a drain batch, so it is split in one pass over
// its bytes, each spec a slice of them: decoding it with encoding/json
// (validate, then reflect into raw copies, then five decodes an element)
// was a fifth of the drainer's allocations and a twentieth of converge's
// CPU at the bench's rate. The strings are read as the labels are
// (scanString).
func parseFlowChecks(checks string) ([]flowCheck, error) {
	var (
		out          []flowCheck
		el           [5][]byte
		kind, vers   []byte // the last check's names, raw: a batch's checks share a few kinds
		lastK, lastV string
	)
	_, err := eachElement([]byte(checks), func(i int, item []byte) error {
		n, perr := eachElement(item, func(j int, e []byte) error {
			if j < len(el) {
				el[j] = e
			}
			return nil
		})
		if perr != nil {
			return fmt.Errorf("check %d: %w", i, perr)
		}
		if n != len(el) {
			return fmt.Errorf("check %d: %d elements, want %d", i, n, len(el))
		}
		c := flowCheck{spec: el[4]}
		var err error
		if q := el[0]; len(q) == 38 && q[0] == '"' && q[37] == '"' { // as Postgres prints a uuid
			c.id, err = uuid.ParseBytes(q[1:37])
		} else if id, serr := jsonString(q); serr == nil {
			c.id, err = uuid.Parse(id) // another of the forms uuid reads
		} else {
			err = serr
		}
		if err != nil {
			return fmt.Errorf("check %d: id: %w", i, err)
		}
		if !bytes.Equal(kind, el[1]) {
			if lastK, err = jsonString(el[1]); err != nil {
				return fmt.Errorf("check %d: kind: %w", i, err)
			}
			kind = el[1]
		}
		if !bytes.Equal(vers, el[2]) {
			if lastV, err = jsonString(el[2]); err != nil {
				return fmt.Errorf("check %d: version: %w", i, err)
			}
			vers = el[2]
		}
		c.kind, c.version = lastK, lastV
		if c.gen, err = parseGen(el[3]); err != nil {
			return fmt.Errorf("check %d: manifest generation: %w", i, err)
		}
		out = append(out, c)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// eachElement calls fn with each element of the JSON array b (a slice of
// b, the whitespace around it trimmed) and its index, and returns how many
// there were. An element is checked only for balanced brackets and
// terminated strings; its own syntax is its reader's concern (a spec's,
// the validator's, which parses it).
func eachElement(b []byte, fn func(i int, el []byte) error) (int, error) {
	i := skipSpace(b, 0)
	if i == len(b) || b[i] != '[' {
		return 0, errNotArray
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		if skipSpace(b, i+1) != len(b) {
			return 0, errTrailing
		}
		return 0, nil
	}
	for n := 0; ; n++ {
		start := i
		end, err := skipValue(b, i)
		if err != nil {
			return 0, err
		}
		if end == start {
			return 0, errNoValue
		}
		if err := fn(n, b[start:end]); err != nil {
			return 0, err
		}
		i = skipSpace(b, end)
		if i == len(b) {
			return 0, errUnterminated
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case ']':
			if skipSpace(b, i+1) != len(b) {
				return 0, errTrailing
			}
			return n + 1, nil
		default:
			return 0, fmt.Errorf("flow checks: unexpected %q at offset %d", b[i], i)
		}
	}
}

var (
	errNotArray     = errors.New("flow checks: not a JSON array")
	errTrailing     = errors.New("flow checks: data after the array")
	errUnterminated = errors.New("flow checks: unterminated array")
	errNoValue      = errors.New("flow checks: missing value")
)

// skipValue returns the offset just past the value starting at b[i]: a
// string, an object or array (to its matching bracket), or a scalar (to the
// next delimiter).
func skipValue(b []byte, i int) (int, error) {
	depth := 0
	for j := i; j < len(b); j++ {
		switch c := b[j]; c {
		case '"':
			end, err := skipString(b, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
			if depth == 0 {
				return end, nil
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 { // a scalar's end: the enclosing array's bracket
				return j, nil
			}
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return j, nil
			}
		}
	}
	if depth > 0 {
		return 0, errUnterminated
	}
	return len(b), nil
}

// skipString returns the offset just past the string whose quote is b[i].
func skipString(b []byte, i int) (int, error) {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errors.New("flow checks: unterminated string")
}

// parseGen reads a manifest generation, a non-negative JSON integer,
// without the string strconv would need; anything else (a sign, a leading
// zero, more digits than an int64 surely holds) is strconv's to read or
// refuse.
func parseGen(b []byte) (int64, error) {
	if len(b) == 0 || len(b) > 18 || len(b) > 1 && b[0] == '0' {
		return strconv.ParseInt(string(b), 10, 64)
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return strconv.ParseInt(string(b), 10, 64)
		}
		n = n*10 + int64(c-'0')
	}
	return n, nil
}

// jsonString decodes the JSON string b (scanString's reading, with
// encoding/json's error for what it refuses).
func jsonString(b []byte) (string, error) {
	if s, next, ok := scanString(b, 0); ok && next == len(b) {
		return s, nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return "", err
	}
	return s, nil
}
