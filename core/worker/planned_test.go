package worker

import (
	"errors"
	"fmt"
	"testing"

	"connectrpc.com/connect"

	"github.com/converge-run/converge/workerproto"
)

// A broker's planned end of a session (it drained, or the session reached
// its maximum age) is told apart from a lost stream, through the wrapping
// the session adds.
func TestPlannedEnd(t *testing.T) {
	t.Parallel()
	planned := connect.NewError(connect.CodeUnavailable,
		errors.New(workerproto.PlannedSessionEnd+": the session reached WORKER_SESSION_MAX_AGE; reconnect"))
	cases := map[string]struct {
		err  error
		want bool
	}{
		"planned, as the session returns it": {err: fmt.Errorf("receive: %w", planned), want: true},
		"a lost connection":                  {err: connect.NewError(connect.CodeUnavailable, errors.New("connection reset")), want: false},
		"another code":                       {err: connect.NewError(connect.CodeInternal, errors.New(workerproto.PlannedSessionEnd)), want: false},
		"not a Connect status":               {err: errors.New(workerproto.PlannedSessionEnd), want: false},
		"none":                               {err: nil, want: false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := plannedEnd(tc.err); got != tc.want {
				t.Fatalf("plannedEnd(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
