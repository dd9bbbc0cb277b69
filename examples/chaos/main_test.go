package main

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/examples/stack"
)

// A fault selection that selects nothing, or a repeat count below one, is a
// user's mistake: refused with the flag named, never a run of the fault-free
// waves alone that looks like a pass; so is -smoke beside -faults, where one
// of the two would be ignored.
func TestPick_RefusesASelectionOfNothing(t *testing.T) {
	t.Parallel()
	all := []scenario{{key: "worker-kill"}, {key: "pg-freeze", full: true}}
	cases := map[string]struct {
		reason string
		only   string
		smoke  bool
		repeat int
		want   string
	}{
		"OnlyCommas":     {reason: "-faults , names no fault", only: ",", repeat: 1, want: "-faults"},
		"ZeroRepeat":     {reason: "-repeat 0 would run each fault zero times", only: "worker-kill", repeat: 0, want: "-repeat"},
		"NegativeRepeat": {reason: "-repeat -1", repeat: -1, want: "-repeat"},
		"UnknownFault":   {reason: "a typo", only: "worker-kil", repeat: 1, want: `unknown fault "worker-kil"`},
		"SmokeAndFaults": {reason: "-smoke picks its own faults: with -faults one of the two would be ignored", only: "pg-freeze", smoke: true, repeat: 1, want: "-smoke"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			picked, err := pick(all, tc.only, tc.smoke, tc.repeat)
			require.ErrorContains(t, err, tc.want, tc.reason)
			require.Empty(t, picked)
		})
	}
}

// Each named fault runs repeat times in a row, in the order named; the
// smoke keeps the faults not marked full.
func TestPick_SelectsInOrder(t *testing.T) {
	t.Parallel()
	all := []scenario{{key: "worker-kill"}, {key: "pg-freeze", full: true}}
	keys := func(scs []scenario) []string {
		var out []string
		for _, sc := range scs {
			out = append(out, sc.key)
		}
		return out
	}
	picked, err := pick(all, "pg-freeze,none,worker-kill", false, 2)
	require.NoError(t, err)
	require.Equal(t, []string{"pg-freeze", "pg-freeze", "none", "none", "worker-kill", "worker-kill"}, keys(picked))
	picked, err = pick(all, "", true, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"worker-kill"}, keys(picked))
	picked, err = pick(all, "", false, 1)
	require.NoError(t, err)
	require.Equal(t, []string{"worker-kill", "pg-freeze"}, keys(picked))
}

// A bad selection is refused before the cluster boots (a boot builds the
// binaries and starts Postgres and nine processes: a typo should cost
// nothing). The context is already cancelled, so a boot could not succeed.
func TestRun_RefusesABadSelectionBeforeBooting(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	err := run(ctx, new(atomic.Pointer[stack.Stack]), 1, false, "worker-kil", 1)
	require.ErrorContains(t, err, `unknown fault "worker-kil"`)
}
