package stack

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"
)

func TestParseProcStat(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		line   string
		want   procTimes
		err    bool
	}{
		"Plain": {
			reason: "fields 4 and 14-17 are ppid, utime, stime, cutime, cstime",
			line:   "42 (postgres) S 7 42 42 0 -1 4194560 100 0 0 0 11 22 33 44 20 0 1 0 5 0 0",
			want:   procTimes{ppid: 7, utime: 11, stime: 22, cutime: 33, cstime: 44},
		},
		"NameWithSpacesAndParens": {
			reason: "the command name may hold spaces and ')': fields start after the last ')'",
			line:   "42 (a) b (c)) R 9 42 42 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 5 0 0",
			want:   procTimes{ppid: 9, utime: 1, stime: 2, cutime: 3, cstime: 4},
		},
		"Truncated": {
			reason: "too few fields is an error, not zeros",
			line:   "42 (x) S 1 2 3",
			err:    true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := parseProcStat(42, []byte(tc.line))
			if tc.err {
				require.Error(t, err, tc.reason)
				return
			}
			require.NoError(t, err, tc.reason)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(procTimes{})); diff != "" {
				t.Errorf("%s: -want +got:\n%s", tc.reason, diff)
			}
		})
	}
}

// burn is a child that spends CPU for a while and exits.
func burn(loops string) *exec.Cmd {
	return exec.Command("sh", "-c", `i=0; while [ $i -lt `+loops+` ]; do i=$((i+1)); done`)
}

func TestTreeCPU(t *testing.T) {
	// Not parallel: the test reads its own process's children.
	self := os.Getpid()

	t.Run("CountsExitedChildren", func(t *testing.T) {
		before, err := TreeCPU(self)
		require.NoError(t, err)
		cmd := burn("200000")
		require.NoError(t, cmd.Run())
		child := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
		require.Positive(t, child, "the child used some CPU")
		after, err := TreeCPU(self)
		require.NoError(t, err)
		require.GreaterOrEqual(t, after-before, child-20*time.Millisecond, "a reaped child's time is in the parent's cutime/cstime (±2 ticks)")
	})

	t.Run("CountsLiveChildren", func(t *testing.T) {
		cmd := burn("100000000")
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		var child time.Duration
		require.Eventually(t, func() bool {
			var err error
			child, err = ProcessCPU(cmd.Process.Pid)
			return err == nil && child >= 50*time.Millisecond
		}, 30*time.Second, 10*time.Millisecond, "the child runs")
		own, err := ProcessCPU(self)
		require.NoError(t, err)
		tree, err := TreeCPU(self)
		require.NoError(t, err)
		require.GreaterOrEqual(t, tree, own+child, "a live child's time is added to the parent's")
	})
}
