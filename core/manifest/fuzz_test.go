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
	for _, s := range []string{`{}`, `null`, `[]`, `{"kind":"x","reactions":[]}`, `{"kind":"\u0000"}`, `{"kind":"a","spec_schema":{"type":"object","properties":{"a":{"$ref":"#"}}}}`,
		`{"kind":"a","reactions":[{"name":"r","trigger":"childrenSettled","emits":["status"],"reads":["childStatus","spec"]}]}`,
		`{"kind":"a","reactions":[{"name":"w","trigger":"specChange","emits":["status"],"reads":[]}]}`,
		`{"kind":"a","reactions":[{"name":"w","trigger":"specChange","emits":["status"],"reads":["spec","spec"]}]}`,
		`{"kind":"a","reactions":[{"name":"w","trigger":"specChange","emits":["status"],"reads":null}]}`} {
		f.Add([]byte(s))
	}
}

// FuzzParse: any input is either a manifest or a *ValidationError (or a
// decode error) — never a panic — and a manifest Parse accepts passes
// ValidateManifest too; its reactions' reads are within AllReads, childStatus
// only on childrenSettled, and survive a JSON round trip.
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
		for _, r := range m.Reactions {
			requireReadsHold(t, r)
		}
	})
}

// requireReadsHold holds a parsed reaction's reads to the lattice and to
// its JSON form.
func requireReadsHold(t *testing.T, r ReactionDecl) {
	t.Helper()
	if r.Reading()&^AllReads != 0 {
		t.Fatalf("reaction %s reads %b, outside AllReads", r.Name, r.Reading())
	}
	if r.Reads != nil && r.Reads.Has(ReadChildStatus) && r.Trigger != TriggerChildrenSettled {
		t.Fatalf("reaction %s (%s) declares childStatus", r.Name, r.Trigger)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("marshal reaction %s: %v", r.Name, err)
	}
	var back ReactionDecl
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("unmarshal reaction %s: %v", b, err)
	}
	if (back.Reads == nil) != (r.Reads == nil) || back.Reading() != r.Reading() {
		t.Fatalf("reaction %s: reads %v do not survive the round trip %s", r.Name, r.Reads, b)
	}
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
