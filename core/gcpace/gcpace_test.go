package gcpace

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPercent(t *testing.T) {
	t.Parallel()
	const mb = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, maxPercent},      // nothing live yet
		{1 * mb, maxPercent}, // 3,200 capped
		{4 * mb, 800},        // 4 MB live, 32 MB more
		{9 * mb, 356},        // 32/9, rounded up
		{32 * mb, 100},       // the headroom reached: GOGC=100
		{300 * mb, 100},      // a big heap grows by what is live
	} {
		require.Equal(t, c.want, Percent(c.live, 32*mb), "live %d MB", c.live/mb)
	}
}

// helperResult is what a paced or unpaced process reports.
type helperResult struct {
	Cycles  uint32 // collections while it allocated
	Paced   int64  // cycles the pacer saw end (0: not started)
	Percent int    // the runtime's percent at the end
}

// TestStart_ASmallHeapIsCollectedLessOften runs this test binary again to
// allocate 512 MB of short-lived objects over a 1 MB live heap, once with
// GOGC unset (paced) and once with GOGC=100 (the operator's setting, left
// alone), and counts the collections: the paced process runs a fraction of
// the cycles. Separate processes: the pacer sets the runtime's percent for
// the whole process.
func TestStart_ASmallHeapIsCollectedLessOften(t *testing.T) {
	if os.Getenv("GCPACE_HELPER") == "1" {
		allocate()
		return
	}
	t.Parallel()
	paced, unpaced := runHelper(t, ""), runHelper(t, "100")
	t.Logf("paced: %+v; GOGC=100: %+v", paced, unpaced)
	require.Positive(t, paced.Paced, "the pacer saw cycles end")
	require.LessOrEqual(t, paced.Cycles*3, unpaced.Cycles, "a third of the cycles at most")
	require.Zero(t, unpaced.Paced, "GOGC set: no pacer")
	require.Equal(t, 100, unpaced.Percent, "the operator's GOGC kept")
}

func runHelper(t *testing.T, gogc string) helperResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestStart_ASmallHeapIsCollectedLessOften$", "-test.count=1")
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOGC=") || strings.HasPrefix(kv, "GOMEMLIMIT=")
	}), "GCPACE_HELPER=1", "GOGC="+gogc)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	_, line, found := strings.Cut(string(out), "RESULT ")
	require.True(t, found, "%s", out)
	var res helperResult
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(line, "\n", 2)[0]), &res))
	return res
}

var sink []byte

// allocate is the helper process: a 1 MB live heap, then 512 MB allocated
// 1 KB at a time, each dropped at once.
func allocate() {
	p := Start(Headroom)
	live := make([][]byte, 1<<10)
	for i := range live {
		live[i] = make([]byte, 1<<10)
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 512 << 10 {
		sink = make([]byte, 1<<10)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(live)
	percent := debug.SetGCPercent(-1) // read, then put back
	debug.SetGCPercent(percent)
	res := helperResult{Cycles: after.NumGC - before.NumGC, Percent: percent}
	if p != nil {
		res.Paced = p.Cycles()
	}
	out, _ := json.Marshal(res)
	fmt.Println("RESULT " + string(out))
}
