package stdio

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseOutcome_ExactlyOneObject: stdout is empty or exactly one JSON
// object; trailing data (a stray bracket, a second value) and a value that
// is not an object (null, an array, a string) are refused.
func TestParseOutcome_ExactlyOneObject(t *testing.T) {
	t.Parallel()
	for _, s := range []string{`{"status":{"a":1}}}`, `{"status":{"a":1}}]`, `{"status":{"a":1}} ]]]`, `{} {}`, `null`, `[]`, `"x"`, `1`} {
		_, err := ParseOutcome([]byte(s))
		require.Error(t, err, s)
	}
	for _, s := range []string{``, "  \n", `{"status":{"a":1}}`, "{\"status\":{\"a\":1}}\n\n"} {
		_, err := ParseOutcome([]byte(s))
		require.NoError(t, err, s)
	}
	_, err := ParseOutcome([]byte(`{"status":{}} x`))
	require.ErrorContains(t, err, "more than one JSON value on stdout")
	_, err = ParseOutcome([]byte(`null`))
	require.ErrorContains(t, err, "want a JSON object")
}
