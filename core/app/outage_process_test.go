package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/app/apptest"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
	"github.com/converge-run/converge/core/worker"
	"github.com/converge-run/converge/db/pgcluster"
	"github.com/converge-run/converge/db/pgtest"
)

// logLine is one JSON line a helper process logged, with when it arrived.
type logLine struct {
	at       time.Time
	level    string
	msg      string
	memberID string // its member_id field, if any
	removed  string // its removed_member_id field, if any
}

// capturedLog collects a helper's JSON log lines.
type capturedLog struct {
	mu    sync.Mutex
	lines []logLine
}

func (c *capturedLog) read(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m struct {
			Level    string `json:"level"`
			Message  string `json:"message"`
			MemberID string `json:"member_id"`
			Removed  string `json:"removed_member_id"`
		}
		line := sc.Text()
		fmt.Fprintln(os.Stderr, line)
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		c.mu.Lock()
		c.lines = append(c.lines, logLine{at: time.Now(), level: m.Level, msg: m.Message, memberID: m.MemberID, removed: m.Removed})
		c.mu.Unlock()
	}
}

// between are the lines that arrived in [from, to).
func (c *capturedLog) between(from, to time.Time) []logLine {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []logLine
	for _, l := range c.lines {
		if !l.at.Before(from) && l.at.Before(to) {
			out = append(out, l)
		}
	}
	return out
}

// spawnLogged starts a converge helper whose JSON log is captured.
func spawnLogged(t *testing.T, logs *capturedLog, env ...string) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run", "^TestHelperProcess$")
	cmd.Env = append(append(os.Environ(), "CONVERGE_HELPER=server", "HELPER_LOG=json"), env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	cmd.Stdout = os.Stderr
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { logs.read(stderr); _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
}

func readyz(port int) int {
	res, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
	if err != nil {
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}

// While its Postgres is down the process logs one WARN (and nothing like an
// error per loop iteration), /readyz answers 503, and within about two
// seconds of the database's return it logs one INFO with the outage's length
// and work flows again.
func TestProcess_ADatabaseOutageIsQuietAndShort(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, port := t.TempDir(), freePort(t)
	pg, err := pgcluster.Start(ctx, pgcluster.Options{DataDir: dir, Port: port, Fast: true, Logger: zerolog.Nop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	require.NoError(t, pg.CreateDatabase(ctx, "converge"))
	dbURL := pg.URL("converge")

	logs := &capturedLog{}
	api := freePort(t)
	spawnLogged(t, logs, "DATABASE_URL="+dbURL, "ROLE=all", fmt.Sprintf("LISTEN_ADDR=127.0.0.1:%d", api),
		"MEMBER_HEARTBEAT_EVERY=1s", "SHUTDOWN_DRAIN=5s")
	apptest.WaitFor(t, apptest.BootWithin, "converge is ready", func() bool { return readyz(api) == http.StatusOK })
	pool := pgtest.PoolFor(t, dbURL)
	st := store.New(pool, nil)
	applyManifest(t, st, leafKind)
	apptest.StartWorker(t, fmt.Sprintf("http://127.0.0.1:%d", api), worker.Options{}, apptest.NewProvider("leaf", leafWork))
	applyResource(t, st, "leaf", "before", `{}`)
	apptest.WaitPhase(t, st, "leaf", "before", resource.PhaseReady, 60*time.Second)

	down := time.Now()
	require.NoError(t, pg.Stop())
	apptest.WaitFor(t, 10*time.Second, "/readyz reports the outage", func() bool { return readyz(api) == http.StatusServiceUnavailable })
	const outage = 8 * time.Second
	for time.Since(down) < outage {
		require.NotEqual(t, http.StatusOK, readyz(api), "not ready while the database is down")
		time.Sleep(250 * time.Millisecond) // pacing the probe, not a wait for a condition
	}
	pg, err = pgcluster.Start(ctx, pgcluster.Options{DataDir: dir, Port: port, Fast: true, Logger: zerolog.Nop()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	back := time.Now()
	applyResource(t, st, "leaf", "after", `{}`)
	apptest.WaitPhase(t, st, "leaf", "after", resource.PhaseReady, 60*time.Second)
	resumed := time.Since(back)
	apptest.WaitFor(t, 10*time.Second, "the return is logged", func() bool {
		for _, l := range logs.between(back, time.Now()) {
			if l.msg == "database reachable again; loops resumed" {
				return true
			}
		}
		return false
	})
	during := logs.between(down, back)
	warns := 0
	for _, l := range during {
		if l.level == "warn" && l.msg == "database unreachable; loops back off quietly until it returns" {
			warns++
		}
	}
	for _, l := range during {
		t.Logf("during the outage: %s %s", l.level, l.msg)
	}
	t.Logf("outage %s: %d log lines (%d outage WARN); work resumed %s after the database returned",
		back.Sub(down).Round(time.Millisecond), len(during), warns, resumed.Round(time.Millisecond))
	require.Equal(t, 1, warns, "one WARN when the database goes")
	require.LessOrEqual(t, len(during), int(back.Sub(down)/time.Second), "at most a line per second while it is down")
	require.Less(t, resumed, 3*time.Second, "work resumes within about two seconds of the return")
}
