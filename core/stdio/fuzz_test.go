package stdio

import (
	"testing"
)

// FuzzParseOutcome: whatever a program prints, ParseOutcome returns an
// outcome or an error, never panics.
func FuzzParseOutcome(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"status":{"a":1}}`, `{"status":{},"health_ok":true,"conditions":[{"type":"Ready","status":"True"}]}`,
		`{"error":"boom","terminal":true}`, `{"statsu":{}}`, `{} {}`, `[1]`, `{"children":[{"kind":"k","name":"n","spec":{}}]}`, "\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(_ *testing.T, stdout []byte) {
		_, _ = ParseOutcome(stdout)
	})
}
