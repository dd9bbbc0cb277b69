package cli_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
)

func TestApplyWait_ExitsOnReadyFailureOrTimeout(t *testing.T) {
	t.Parallel()
	s := startStack(t, stackOpts{})
	for _, f := range []string{"account.kind.json", "vpc.kind.json", "route.kind.json", "bom.kind.json"} {
		must(t, s.conctl("apply", "-f", filepath.Join(classicFixtures, f)))
	}
	cases := []struct {
		reason   string
		doc      string
		timeout  string
		tty      bool
		wantCode int
		stdout   []string
		stderr   []string
	}{
		{reason: "a BOM whose leaves succeed ends 0 once the root is READY",
			doc:      `{"kind":"bom","name":"good","labels":{},"spec":{"teams":2,"routes_per_team":1,"leaf_sim":{"latency_ms":0,"failure_rate":0}}}`,
			wantCode: 0,
			stdout:   []string{"resource/bom/good created\n", "resource/bom/good is READY (6/6 children ready)\n"},
			// Progress while it settles; how many children are READY at the
			// first read depends on the machine (the leaves take 0 ms).
			stderr: []string{"resource/bom/good RECONCILING"}},
		{reason: "on a terminal the progress is a bar",
			doc:      `{"kind":"bom","name":"tty","labels":{},"spec":{"teams":1,"routes_per_team":2,"leaf_sim":{"latency_ms":0,"failure_rate":0}}}`,
			tty:      true,
			wantCode: 0,
			stdout:   []string{"resource/bom/tty is READY (4/4 children ready)\n"},
			stderr:   []string{"bom/tty READY (4/4 children ready)", "100%"}},
		{reason: "a leaf that fails for good ends 1 at once, with its reason",
			doc:      `{"kind":"account","name":"doomed","labels":{},"spec":{"team":"x","sim":{"latency_ms":0,"terminal_failure_rate":1}}}`,
			wantCode: 1,
			stderr:   []string{"Error: resource/account/doomed FAILED (terminal): ReconcileError: simulated terminal failure"}},
		{reason: "a BOM whose leaves fail for good ends 1, naming each failure as it happens and the children stuck behind them",
			doc:      `{"kind":"bom","name":"bad","labels":{},"spec":{"teams":2,"routes_per_team":1,"leaf_sim":{"latency_ms":0,"terminal_failure_rate":1}}}`,
			wantCode: 1,
			stderr: []string{"FAILED account/bad-t0-account (terminal): ReconcileError: simulated terminal failure",
				"FAILED account/bad-t1-account (terminal)", "Error: resource/bom/bad cannot become READY",
				"failed for good: account/bad-t0-account", "4 waiting behind them"}},
		{reason: "a resource that does not settle in time ends 1 with a timeout",
			doc:      `{"kind":"account","name":"slow","labels":{},"spec":{"team":"x","sim":{"latency_ms":60000}}}`,
			timeout:  "1s",
			wantCode: 1,
			stderr:   []string{"Error: timed out after 1s waiting for resource/account/slow: it is RECONCILING"}},
		{reason: "a timeout that ends before the wait has read the resource (a loaded machine, a slow server) is still the timeout",
			doc:      `{"kind":"account","name":"early","labels":{},"spec":{"team":"x","sim":{"latency_ms":60000}}}`,
			timeout:  "1ns",
			wantCode: 1,
			stderr:   []string{"Error: timed out after 1ns waiting for resource/account/early"}},
	}
	for _, tc := range cases {
		timeout := tc.timeout
		if timeout == "" {
			timeout = "90s"
		}
		var out, errb syncBuffer
		env := testEnv(s.server, tc.doc, &out, &errb)
		env.StderrIsTerminal = tc.tty
		code := cli.Run(context.Background(), env, []string{"apply", "-f", "-", "--wait", "--timeout", timeout})
		require.Equalf(t, tc.wantCode, code, "%s\nstdout:\n%s\nstderr:\n%s", tc.reason, out.String(), errb.String())
		for _, want := range tc.stdout {
			require.Containsf(t, out.String(), want, tc.reason)
		}
		for _, want := range tc.stderr {
			require.Containsf(t, errb.String(), want, tc.reason)
		}
		if tc.wantCode != 0 {
			n := 0
			for _, l := range strings.Split(errb.String(), "\n") {
				if strings.HasPrefix(l, "Error: ") {
					n++
				}
			}
			require.Equal(t, 1, n, "%s: one error line\n%s", tc.reason, errb.String())
		}
	}
}
