package resource

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Change is one difference between two JSON documents: the value at Path (a
// JSON pointer, "" for the whole document) before and after. A nil side is
// absent there (an added or removed member).
type Change struct {
	Path   string
	Before json.RawMessage
	After  json.RawMessage
}

// Diff lists the differences between two JSON documents, object members by
// key, arrays element by element (a length change adds or removes the
// tail), paths in document order (object keys sorted). A nil or empty
// side is absent. It fails only on malformed JSON. Numbers keep their
// digits and compare exactly by value (1, 1.0 and 1e0 are equal, as in
// jsonb; 123456789012345678 and 123456789012345679 are not).
func Diff(before, after json.RawMessage) ([]Change, error) {
	var a, b any
	if len(bytes.TrimSpace(before)) > 0 {
		if err := decodeExact(before, &a); err != nil {
			return nil, fmt.Errorf("diff: before: %w", err)
		}
	}
	if len(bytes.TrimSpace(after)) > 0 {
		if err := decodeExact(after, &b); err != nil {
			return nil, fmt.Errorf("diff: after: %w", err)
		}
	}
	var out []Change
	diffValue(&out, "", a, b, len(bytes.TrimSpace(before)) > 0, len(bytes.TrimSpace(after)) > 0)
	return out, nil
}

func diffValue(out *[]Change, path string, a, b any, hasA, hasB bool) {
	if hasA && hasB {
		if ma, ok := a.(map[string]any); ok {
			if mb, ok := b.(map[string]any); ok {
				diffObject(out, path, ma, mb)
				return
			}
		}
		if sa, ok := a.([]any); ok {
			if sb, ok := b.([]any); ok {
				diffArray(out, path, sa, sb)
				return
			}
		}
		if jsonEqual(a, b) {
			return
		}
	}
	if !hasA && !hasB {
		return
	}
	c := Change{Path: path}
	if hasA {
		c.Before = mustJSON(a)
	}
	if hasB {
		c.After = mustJSON(b)
	}
	*out = append(*out, c)
}

func diffObject(out *[]Change, path string, a, b map[string]any) {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		va, okA := a[k]
		vb, okB := b[k]
		diffValue(out, path+"/"+escapePointer(k), va, vb, okA, okB)
	}
}

func diffArray(out *[]Change, path string, a, b []any) {
	for i := range max(len(a), len(b)) {
		var va, vb any
		if i < len(a) {
			va = a[i]
		}
		if i < len(b) {
			vb = b[i]
		}
		diffValue(out, path+"/"+strconv.Itoa(i), va, vb, i < len(a), i < len(b))
	}
}

// decodeExact decodes one JSON document with numbers as json.Number.
func decodeExact(raw []byte, v *any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}

func jsonEqual(a, b any) bool {
	if na, ok := a.(json.Number); ok {
		if nb, ok := b.(json.Number); ok {
			return canonicalNumber(string(na)) == canonicalNumber(string(nb))
		}
	}
	return bytes.Equal(mustJSON(a), mustJSON(b))
}

// canonicalNumber is a JSON number's exact value as sign, significant
// digits and exponent ("-12e3"), so that equal values compare equal
// whatever their notation, without building the number (an exponent may
// be huge).
func canonicalNumber(s string) string {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	mant, expPart, _ := strings.Cut(strings.ToLower(s), "e")
	whole, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(whole+frac, "0")
	if digits == "" {
		return "0"
	}
	exp, ok := new(big.Int).SetString(strings.TrimPrefix(expPart, "+"), 10)
	if expPart == "" {
		exp, ok = new(big.Int), true
	}
	if !ok {
		return s // not a JSON number: compare as written
	}
	trimmed := strings.TrimRight(digits, "0")
	exp.Add(exp, big.NewInt(int64(len(digits)-len(trimmed)-len(frac))))
	sign := ""
	if neg {
		sign = "-"
	}
	return sign + trimmed + "e" + exp.String()
}

// mustJSON re-encodes a decoded JSON value, which cannot fail.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`null`)
	}
	return b
}

func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}
