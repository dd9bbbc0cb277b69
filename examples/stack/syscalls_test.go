package stack

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseProcIO(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		reason string
		text   string
		want   IOCalls
		err    bool
	}{
		"Plain": {
			reason: "syscr and syscw are the read- and write-class calls",
			text:   "rchar: 323934931\nwchar: 323929600\nsyscr: 632687\nsyscw: 632675\nread_bytes: 0\nwrite_bytes: 0\ncancelled_write_bytes: 0\n",
			want:   IOCalls{Reads: 632687, Writes: 632675},
		},
		"Missing": {
			reason: "a file without the counters is an error, not zeros",
			text:   "rchar: 1\nwchar: 2\n",
			err:    true,
		},
		"Garbled": {
			reason: "a counter that is not a number is an error",
			text:   "syscr: many\nsyscw: 3\n",
			err:    true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			got, err := parseProcIO(42, []byte(tc.text))
			if tc.err {
				require.Error(t, err, tc.reason)
				return
			}
			require.NoError(t, err, tc.reason)
			require.Equal(t, tc.want, got, tc.reason)
		})
	}
}

func TestProcessIOCalls_CountsThisProcesssReadsAndWrites(t *testing.T) {
	t.Parallel() // other tests' I/O can only add to the counts
	f := filepath.Join(t.TempDir(), "x")
	before, err := ProcessIOCalls(os.Getpid())
	require.NoError(t, err)
	for range 10 {
		require.NoError(t, os.WriteFile(f, []byte("x"), 0o600))
		_, err := os.ReadFile(f)
		require.NoError(t, err)
	}
	after, err := ProcessIOCalls(os.Getpid())
	require.NoError(t, err)
	d := after.Sub(before)
	require.GreaterOrEqual(t, d.Writes, int64(10), "ten writes")
	require.GreaterOrEqual(t, d.Reads, int64(10), "ten reads")
}
