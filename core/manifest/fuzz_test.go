package manifest

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// seedManifests adds the corpus of legal and illegal manifests.
func seedManifests(f *testing.F) {
	f.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "manifests", "*.json"))
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{`{}`, `null`, `[]`, `{"kind":"x","reactions":[]}`, `{"kind":"\u0000"}`, `{"kind":"a","spec_schema":{"type":"object","properties":{"a":{"$ref":"#"}}}}`} {
		f.Add([]byte(s))
	}
}

// FuzzParse: any input is either a manifest or a *ValidationError (or a
// decode error) — never a panic — and a manifest Parse accepts passes
// ValidateManifest too.
func FuzzParse(f *testing.F) {
	seedManifests(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := Parse(raw)
		if err != nil {
			var ve *ValidationError
			if !errors.As(err, &ve) && json.Valid(raw) {
				t.Logf("non-validation error for valid JSON: %v", err)
			}
			return
		}
		if err := ValidateManifest(raw); err != nil {
			t.Fatalf("Parse accepted what ValidateManifest refuses: %v", err)
		}
		if m.Kind == "" {
			t.Fatal("a parsed manifest has a kind")
		}
	})
}

// FuzzCompileSchema: compiling any schema and validating any document
// against it never panics.
func FuzzCompileSchema(f *testing.F) {
	f.Add([]byte(`{"type":"object","required":["a"],"properties":{"a":{"type":"string","pattern":"^a+$"}}}`), []byte(`{"a":"aa"}`))
	f.Add([]byte(`true`), []byte(`1`))
	f.Add([]byte(`{"$ref":"#/definitions/x","definitions":{"x":{"$ref":"#/definitions/x"}}}`), []byte(`{}`))
	f.Add([]byte(`{"pattern":"("}`), []byte(`"x"`))
	f.Fuzz(func(_ *testing.T, schema, doc []byte) {
		s, err := CompileSchema("/spec_schema", schema)
		if err != nil || s == nil {
			return
		}
		_ = s.Validate(doc)
	})
}
