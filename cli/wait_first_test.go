package cli

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestUntilAnswered_RetriesOnlyWhatTheServerDidNotAnswer: a wait's first
// read is tried again while the server does not answer it (a dial that
// reached nothing, a proxy's 503) and ends at once on an answer (NOT_FOUND,
// a plain 404 upgrade, a bad credential) or a usage error; the timeout ends
// the retries.
func TestUntilAnswered_RetriesOnlyWhatTheServerDidNotAnswer(t *testing.T) {
	t.Parallel()
	refused := &wsUnreachedError{errors.New("dial ws://x/graphql: connection refused")}
	upgrade := func(status int, body string) error {
		return dialError("ws://x/graphql", &http.Response{StatusCode: status, Body: io.NopCloser(strings.NewReader(body))}, errors.New("bad handshake"))
	}
	cases := map[string]struct {
		reason string
		errs   []error // the reads' results, in turn
		calls  int
	}{
		"refused then answered": {reason: "retried until the server answers",
			errs: []error{refused, upgrade(http.StatusServiceUnavailable, "no upstream"), nil}, calls: 3},
		"not found":       {reason: "an answer ends it", errs: []error{&APIError{Code: "NOT_FOUND"}}, calls: 1},
		"a plain 404":     {reason: "not a converge endpoint: a usage error", errs: []error{upgrade(http.StatusNotFound, "")}, calls: 1},
		"a refused token": {reason: "the server's refusal", errs: []error{upgrade(http.StatusUnauthorized, `{"errors":[{"message":"bad token","extensions":{"code":"UNAUTHENTICATED"}}]}`)}, calls: 1},
		"a usage error":   {reason: "not a read", errs: []error{usageError{errors.New("bad flag")}}, calls: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			calls, notes := 0, 0
			err := untilAnswered(t.Context(), func(error) { notes++ }, func() error {
				calls++
				return tc.errs[calls-1]
			})
			require.Equal(t, tc.calls, calls, tc.reason)
			if last := tc.errs[len(tc.errs)-1]; last == nil {
				require.NoError(t, err, tc.reason)
				require.Equal(t, calls, notes, "every unanswered read and the answer are noted")
				return
			}
			require.Error(t, err, tc.reason)
			require.Equal(t, tc.errs[0].Error(), err.Error(), tc.reason)
			require.Zero(t, notes, "an answer is not an outage")
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	err := untilAnswered(ctx, func(error) {}, func() error { return refused })
	require.ErrorIs(t, err, context.DeadlineExceeded, "the timeout ends the retries")

	// A read the end of ctx meets (its deadline passing as it fails) ends
	// the retries with ctx's error too, not the read's.
	ctx, cancel = context.WithCancel(t.Context())
	err = untilAnswered(ctx, func(error) {}, func() error { cancel(); return refused })
	require.ErrorIs(t, err, context.Canceled, "a read that meets the end of ctx ends the retries with ctx's error")
}
