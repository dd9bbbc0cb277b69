package manifest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// simpleDocs are inputs decodeSimple must decode itself: the shapes specs
// take. A change that sent them to encoding/json would pass every
// equivalence check and lose the speed, so it fails here.
var simpleDocs = []string{
	`{}`, `[]`, `null`, `true`, `false`, `0`, `-0`, `1.5e+3`, `-12.25E-2`, `""`,
	`{"vpc_id":"vpc-1","cidr":"10.0.0.0/16","replicas":3,"tags":{"team":"a"}}`,
	` { "a" : [ 1 , 2.0 , -3e2 , true , false , null , "x" ] } `,
	`{"esc":"a\"b\\c\/d\b\f\n\r\t"}`, `{"utf8":"héllo, 世界"}`, `{"dup":1,"dup":2}`,
	`[[[[[[]]]]]]`, `{"big":123456789012345678901234567890,"exact":0.1}`,
	strings.Repeat(`[{"a":`, maxDepth/2) + `1` + strings.Repeat(`}]`, maxDepth/2),
}

// fallbackDocs are inputs decodeSimple leaves to encoding/json: malformed
// documents (whose error encoding/json words) and the rare escapes.
var fallbackDocs = []string{
	``, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{a:1}`, `01`, `1.`, `.5`, `-`, `1e`, `+1`,
	`tru`, `nul`, `truex`, `"a`, `"\u00e9"`, `"\ud83d\ude00"`, `"\x"`, "\"a\tb\"", "\"\xff\"",
	`{} {}`, `[1] x`, `{"a":"b"`, strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2),
}

// TestDecodeSimple_SameValuesAsEncodingJSON: what decodeSimple decodes is
// exactly what the validator's own decoding (encoding/json, UseNumber)
// yields, and what it refuses is left to that decoding.
func TestDecodeSimple_SameValuesAsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, doc := range simpleDocs {
		got, ok := decodeSimple([]byte(doc))
		if !ok {
			t.Errorf("%s: decodeSimple left it to encoding/json", doc)
			continue
		}
		checkSame(t, []byte(doc), got)
	}
	for _, doc := range fallbackDocs {
		if _, ok := decodeSimple([]byte(doc)); ok {
			t.Errorf("%q: decodeSimple accepted it", doc)
		}
	}
}

// TestDecodeSimple_GeneratedDocuments: thousands of generated documents and
// their one-byte corruptions, each either decoded exactly as encoding/json
// decodes it or left to it.
func TestDecodeSimple_GeneratedDocuments(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(29, 13))
	decoded := 0
	for range 4000 {
		doc := []byte(genJSON(r, 0))
		if v, ok := decodeSimple(doc); ok {
			checkSame(t, doc, v)
			decoded++
		}
		bad := bytes.Clone(doc)
		const junk = "{}[],:\"\\ 0-.eE+atn\xff"
		bad[r.IntN(len(bad))] = junk[r.IntN(len(junk))]
		if v, ok := decodeSimple(bad); ok {
			checkSame(t, bad, v)
		}
	}
	if decoded < 3000 {
		t.Fatalf("decodeSimple decoded only %d of 4000 generated documents", decoded)
	}
}

// FuzzDecodeSimple: the same property for any input.
func FuzzDecodeSimple(f *testing.F) {
	for _, d := range append(append([]string{}, simpleDocs...), fallbackDocs...) {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if v, ok := decodeSimple(doc); ok {
			checkSame(t, doc, v)
		}
	})
}

func checkSame(t *testing.T, doc []byte, got any) {
	t.Helper()
	want, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Errorf("%q: decodeSimple accepted what encoding/json refuses (%v)", doc, err)
		return
	}
	// reflect.DeepEqual decides; cmp.Diff only words a difference (its
	// report takes time exponential in the nesting, seconds at 20 levels).
	if !reflect.DeepEqual(want, got) {
		t.Errorf("%q: decodeSimple differs from encoding/json (-want +got):\n%s", doc, cmp.Diff(want, got))
	}
}

// genJSON writes a random document: the specs' shapes plus escapes, odd
// numbers and odd spacing.
func genJSON(r *rand.Rand, depth int) string {
	ws := func() string { return []string{"", "", " ", "\n\t", "\r "}[r.IntN(5)] }
	list := func(open, closing string, item func() string) string {
		var b strings.Builder
		b.WriteString(open + ws())
		for i := range r.IntN(5) {
			if i > 0 {
				b.WriteString("," + ws())
			}
			b.WriteString(item())
		}
		b.WriteString(ws() + closing)
		return b.String()
	}
	switch n := r.IntN(10); {
	case depth < 4 && n < 3:
		return list("{", "}", func() string {
			return fmt.Sprintf("%s%s:%s%s", genString(r), ws(), ws(), genJSON(r, depth+1))
		})
	case depth < 4 && n < 5:
		return list("[", "]", func() string { return genJSON(r, depth+1) })
	case n < 7:
		return genString(r)
	case n < 9:
		return []string{"0", "-0", "7", "-12", "3.25", "1e9", "-2.5E-3", "1E+2", "18446744073709551617", "0.1"}[r.IntN(10)]
	default:
		return []string{"true", "false", "null"}[r.IntN(3)]
	}
}

func genString(r *rand.Rand) string {
	parts := []string{"a", "vpc_id", "10.0.0.0/16", " ", "é", "世", `\"`, `\\`, `\/`, `\n`, `\t`, `\u0041`}
	var b strings.Builder
	b.WriteByte('"')
	for range r.IntN(4) {
		b.WriteString(parts[r.IntN(len(parts))])
	}
	b.WriteByte('"')
	return b.String()
}

// BenchmarkDecodeSpec: a composed child's spec decoded for validation, by
// decodeSimple and by the validator's own decoding (encoding/json).
func BenchmarkDecodeSpec(b *testing.B) {
	doc := []byte(`{"vpc_id":"vpc-00000000-0000-0000-0000-000000000001","cidr":"10.1.2.0/24","zone":"eu-west-1a","replicas":3,"tags":{"team":"core","env":"bench"}}`)
	b.Run("simple", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, ok := decodeSimple(doc); !ok {
				b.Fatal("not decoded")
			}
		}
	})
	b.Run("encoding_json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
