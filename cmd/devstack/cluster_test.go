package main_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
)

// clusterStack is a devstack running a local cluster, driven through its
// stdin commands and read through its stdout lines.
type clusterStack struct {
	*devstack
	stdin   io.WriteCloser
	members map[string]member
	out     chan string // stdout lines after ready:
}

type member struct {
	role, url string
	pid       int
}

// startCluster runs devstack with the cluster flags and parses its member
// lines ("member: NAME role=ROLE pid=PID [url=URL]").
func startCluster(t *testing.T, args ...string) *clusterStack {
	t.Helper()
	d := &devstack{cmd: exec.Command(bin.devstack, args...), lines: make(chan string, 256), done: make(chan error, 1), stderr: &tailWriter{}}
	d.cmd.Env = append(os.Environ(), "LOG_LEVEL=warn")
	d.cmd.Stderr = d.stderr
	stdin, err := d.cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := d.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, d.cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			d.lines <- sc.Text()
		}
		close(d.lines)
		d.done <- d.cmd.Wait()
	}()
	t.Cleanup(func() {
		if d.cmd.ProcessState == nil {
			_ = d.cmd.Process.Signal(syscall.SIGINT)
			select {
			case err := <-d.done:
				t.Logf("devstack stopped: %v", err)
			case <-time.After(120 * time.Second):
				_ = d.cmd.Process.Kill()
			}
		}
	})
	c := &clusterStack{devstack: d, stdin: stdin, members: map[string]member{}, out: make(chan string, 256)}
	deadline := time.After(4 * time.Minute)
	for d.ready == "" {
		select {
		case line, ok := <-d.lines:
			if !ok {
				t.Fatalf("devstack exited before ready: %v\n%s", <-d.done, d.stderr)
			}
			c.parse(t, line)
		case <-deadline:
			t.Fatalf("devstack printed no ready: line within 4 minutes\n%s", d.stderr)
		}
	}
	go func() {
		for line := range d.lines {
			c.out <- line
		}
		close(c.out)
	}()
	return c
}

func (c *clusterStack) parse(t *testing.T, line string) {
	t.Helper()
	if v, ok := strings.CutPrefix(line, "database: "); ok {
		c.database = v
	}
	if v, ok := strings.CutPrefix(line, "ready: "); ok {
		c.ready = v
	}
	if v, ok := strings.CutPrefix(line, "admin token: "); ok {
		c.token = v
	}
	rest, ok := strings.CutPrefix(line, "member: ")
	if !ok {
		return
	}
	f := strings.Fields(rest)
	var m member
	for _, kv := range f[1:] {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "role":
			m.role = v
		case "url":
			m.url = v
		case "pid":
			pid, err := strconv.Atoi(v)
			require.NoError(t, err, line)
			m.pid = pid
		}
	}
	c.members[f[0]] = m
}

// expect waits for a stdout line with the prefix.
func (c *clusterStack) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case line, ok := <-c.out:
			if !ok {
				t.Fatalf("devstack exited while waiting for %q: %v\n%s", prefix, <-c.done, c.stderr)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-deadline:
			t.Fatalf("no %q line within %s\n%s", prefix, within, c.stderr)
		}
	}
}

type gqlMember struct {
	ID      string `json:"id"`
	Role    string `json:"role"`
	Status  string `json:"status"`
	ShardLo *int   `json:"shardLo"`
	ShardHi *int   `json:"shardHi"`
	Pid     int    `json:"pid"`
}

// clusterMembers reads the membership through the GraphQL API, with the
// admin token devstack printed.
func clusterMembers(ctx context.Context, api, token string) ([]gqlMember, error) {
	body := []byte(`{"query":"{ clusterMembers { id role status shardLo shardHi pid } }"}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/graphql", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var out struct {
		Data struct {
			ClusterMembers []gqlMember `json:"clusterMembers"`
		} `json:"data"`
		Errors []json.RawMessage `json:"errors"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	if len(out.Errors) > 0 {
		return nil, fmt.Errorf("graphql errors: %s", out.Errors)
	}
	return out.Data.ClusterMembers, nil
}

// readyBrokers are the READY broker members, by pid.
func readyBrokers(ms []gqlMember) map[int]gqlMember {
	out := map[int]gqlMember{}
	for _, m := range ms {
		if m.Role == "BROKER" && m.Status == "READY" {
			out[m.Pid] = m
		}
	}
	return out
}

// waitFor polls cond every 250ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last: %s)", what, within, last)
}

// TestDevstack_ClusterConvergesThroughADrainAndACrash runs the local
// cluster as real processes (2 controls, 3 brokers, 4 workers), applies a
// bom whose leaves take over a second each, then drains one broker through
// devstack's command and SIGKILLs another from outside while the bom's
// tasks are in flight: the bom still converges, devstack keeps running,
// and the last broker re-tiles to own every shard.
func TestDevstack_ClusterConvergesThroughADrainAndACrash(t *testing.T) {
	t.Parallel()
	c := startCluster(t, args("--no-sample", "--controls", "2", "--brokers", "3", "--workers", "4")...)
	require.Len(t, c.members, 9, "2 controls, 3 brokers and 4 workers are listed: %v", c.members)
	for name, role := range map[string]string{"control-1": "control", "control-2": "control", "broker-1": "broker", "broker-3": "broker", "worker-4": "worker"} {
		require.Equal(t, role, c.members[name].role, name)
	}
	ctx := context.Background()
	brokerPids := []int{c.members["broker-1"].pid, c.members["broker-2"].pid, c.members["broker-3"].pid}
	waitFor(t, 90*time.Second, "three READY brokers tiling the shards", func() (bool, string) {
		ms, err := clusterMembers(ctx, c.ready, c.token)
		if err != nil {
			return false, err.Error()
		}
		rb := readyBrokers(ms)
		for _, pid := range brokerPids {
			if m, ok := rb[pid]; !ok || m.ShardLo == nil {
				return false, fmt.Sprintf("%+v", ms)
			}
		}
		return len(rb) == 3, fmt.Sprintf("%+v", ms)
	})

	st := openStore(t, c.database)
	bom, _, err := st.ApplyResource(ctx, store.ApplyResourceInput{Kind: "bom", Name: "storm",
		Spec: json.RawMessage(`{"teams":4,"routes_per_team":3,"leaf_sim":{"latency_ms":1500,"jitter_ms":500,"failure_rate":0}}`)})
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the bom has composed children (work is in flight)", func() (bool, string) {
		kids, err := st.ListResources(ctx, store.ListOptions{OwnerID: &bom.ID})
		return err == nil && len(kids.Items) > 0, fmt.Sprint(err)
	})

	applied := time.Now()
	_, err = fmt.Fprintln(c.stdin, "drain broker-2")
	require.NoError(t, err)
	c.expect(t, "drained: broker-2", 90*time.Second)
	require.False(t, alive(c.members["broker-2"].pid), "the drained broker has exited")
	t.Logf("broker-2 drained %s after the apply", time.Since(applied).Round(time.Millisecond))

	require.NoError(t, syscall.Kill(c.members["broker-3"].pid, syscall.SIGKILL))
	c.expect(t, "exited: broker-3", 30*time.Second)
	r, err := st.GetResource(ctx, "bom", "storm")
	require.NoError(t, err)
	t.Logf("broker-3 killed %s after the apply, the bom %s", time.Since(applied).Round(time.Millisecond), r.Phase)

	waitFor(t, 4*time.Minute, "the bom converges on the surviving broker", func() (bool, string) {
		r, err := st.GetResource(ctx, "bom", "storm")
		if err != nil {
			return false, err.Error()
		}
		return r.Phase == resource.PhaseReady, string(r.Phase)
	})
	t.Logf("the bom is Ready %s after the apply", time.Since(applied).Round(time.Millisecond))
	waitFor(t, 90*time.Second, "broker-1 alone owns every shard", func() (bool, string) {
		ms, err := clusterMembers(ctx, c.ready, c.token)
		if err != nil {
			return false, err.Error()
		}
		rb := readyBrokers(ms)
		m, ok := rb[c.members["broker-1"].pid]
		return len(rb) == 1 && ok && m.ShardLo != nil && *m.ShardLo == 0 && *m.ShardHi == 256, fmt.Sprintf("%+v", rb)
	})

	_, err = fmt.Fprintln(c.stdin, "list")
	require.NoError(t, err)
	require.Contains(t, c.expect(t, "member: broker-3", 10*time.Second), "exited=", "list shows the killed broker as exited")

	c.interrupt(t)
	for name, m := range c.members {
		require.False(t, alive(m.pid), "%s (pid %d) has exited after Ctrl+C", name, m.pid)
	}
}
