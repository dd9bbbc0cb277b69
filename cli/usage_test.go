package cli

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// A usage error exits 2, so what counts as one matters: cobra's own
// refusals do (their text is all conctl has to go by), an answer of the
// server never does, whatever its text.
func TestIsUsageError_NeverTheServersAnswer(t *testing.T) {
	t.Parallel()
	cases := []struct {
		reason string
		err    error
		want   bool
	}{
		{"conctl's own refusal", usageError{errors.New("--limit 0: want 1-500")}, true},
		{"cobra's unknown command", errors.New(`unknown command "frob" for "conctl"`), true},
		{"cobra's argument count", errors.New("accepts 1 arg(s), received 2"), true},
		{"a server error that mentions arg(s)", fmt.Errorf("run ping on gate/g: %w",
			&APIError{Code: "BAD_USER_INPUT", Message: "the verb accepts 0 arg(s)"}), false},
		{"a server error that starts so", &APIError{Message: "unknown command"}, false},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, isUsageError(tc.err), tc.reason)
	}
}
