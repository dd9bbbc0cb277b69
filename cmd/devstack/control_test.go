package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/cli"
	"github.com/converge-run/converge/core/resource"
	"github.com/converge-run/converge/core/store"
)

// graphql posts one request with the admin token and decodes data into dst.
func graphql(ctx context.Context, api, token, query string, vars map[string]any, dst any) error {
	body, err := json.Marshal(map[string]any{"query": query, "variables": vars})
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/graphql", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var out struct {
		Data   json.RawMessage   `json:"data"`
		Errors []json.RawMessage `json:"errors"`
	}
	if err := json.NewDecoder(res.Body).Decode(&out); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if len(out.Errors) > 0 {
		return fmt.Errorf("graphql errors: %s", out.Errors)
	}
	return json.Unmarshal(out.Data, dst)
}

// memberID is the cluster member id of the process with pid.
func memberID(t *testing.T, ms []gqlMember, pid int) string {
	t.Helper()
	for _, m := range ms {
		if m.Pid == pid {
			return m.ID
		}
	}
	t.Fatalf("no member with pid %d in %+v", pid, ms)
	return ""
}

// tilesAll reports whether the READY brokers with pids own disjoint spans
// covering every shard, and no other broker owns one.
func tilesAll(ms []gqlMember, pids ...int) bool {
	rb := readyBrokers(ms)
	if len(rb) != len(pids) {
		return false
	}
	covered := 0
	for _, pid := range pids {
		m, ok := rb[pid]
		if !ok || m.ShardLo == nil || m.ShardHi == nil {
			return false
		}
		covered += *m.ShardHi - *m.ShardLo
	}
	return covered == 256
}

// TestDevstack_ClusterDrainAndKillThroughTheAPI runs the local cluster as
// real processes and, while a bom's tasks are in flight, drains one broker
// with the drainClusterMember mutation and kills another with `conctl
// cluster kill`: each acts within about a second, the others re-tile its
// shards at once, devstack reports both processes gone (not restarted), and
// the bom converges on the last broker, which owns every shard.
func TestDevstack_ClusterDrainAndKillThroughTheAPI(t *testing.T) {
	t.Parallel()
	c := startCluster(t, args("--no-sample", "--controls", "1", "--brokers", "3", "--workers", "3")...)
	ctx := context.Background()
	b1, b2, b3 := c.members["broker-1"].pid, c.members["broker-2"].pid, c.members["broker-3"].pid
	var ms []gqlMember
	waitFor(t, 90*time.Second, "three READY brokers tiling the shards", func() (bool, string) {
		var err error
		if ms, err = clusterMembers(ctx, c.ready, c.token); err != nil {
			return false, err.Error()
		}
		return tilesAll(ms, b1, b2, b3), fmt.Sprintf("%+v", ms)
	})
	id2, id3 := memberID(t, ms, b2), memberID(t, ms, b3)

	st := openStore(t, c.database)
	_, _, err := st.ApplyResource(ctx, store.ApplyResourceInput{Kind: "bom", Name: "steer",
		Spec: json.RawMessage(`{"teams":3,"routes_per_team":3,"leaf_sim":{"latency_ms":1500,"jitter_ms":500,"failure_rate":0}}`)})
	require.NoError(t, err)
	bom, err := st.GetResource(ctx, "bom", "steer")
	require.NoError(t, err)
	waitFor(t, 60*time.Second, "the bom has composed children (work is in flight)", func() (bool, string) {
		kids, err := st.ListResources(ctx, store.ListOptions{OwnerID: &bom.ID})
		return err == nil && len(kids.Items) > 0, fmt.Sprint(err)
	})

	// Drain broker-2 through the mutation.
	var d struct {
		DrainClusterMember struct{ Status, RequestedBy string }
	}
	asked := time.Now()
	require.NoError(t, graphql(ctx, c.ready, c.token, `mutation($id: ID!) { drainClusterMember(id: $id) { status requestedBy } }`,
		map[string]any{"id": id2}, &d))
	require.Equal(t, "DRAINING", d.DrainClusterMember.Status)
	waitFor(t, 10*time.Second, "broker-1 and broker-3 re-tile broker-2's shards", func() (bool, string) {
		ms, err := clusterMembers(ctx, c.ready, c.token)
		if err != nil {
			return false, err.Error()
		}
		return tilesAll(ms, b1, b3), fmt.Sprintf("%+v", ms)
	})
	t.Logf("re-tiled %s after the drain mutation", time.Since(asked).Round(time.Millisecond))
	require.Contains(t, c.expect(t, "exited: broker-2", 90*time.Second), "status=0 (drained)")
	t.Logf("broker-2 drained and exited %s after the mutation", time.Since(asked).Round(time.Millisecond))
	require.False(t, alive(b2), "the drained broker has exited")

	// Kill broker-3 through conctl.
	var out, errb bytes.Buffer
	env := cli.Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Version: "v-test",
		Getenv: func(k string) string {
			return map[string]string{"CONVERGE_SERVER": c.ready, "CONVERGE_TOKEN": c.token}[k]
		}}
	asked = time.Now()
	require.Equal(t, 0, cli.Run(ctx, env, []string{"cluster", "kill", id3}), "stdout %s stderr %s", &out, &errb)
	require.Contains(t, out.String(), "kill requested")
	require.Contains(t, c.expect(t, "exited: broker-3", 30*time.Second), "status=137 (killed)")
	t.Logf("broker-3 exited %s after conctl cluster kill", time.Since(asked).Round(time.Millisecond))
	waitFor(t, 30*time.Second, "broker-1 alone owns every shard", func() (bool, string) {
		ms, err := clusterMembers(ctx, c.ready, c.token)
		if err != nil {
			return false, err.Error()
		}
		return tilesAll(ms, b1), fmt.Sprintf("%+v", ms)
	})
	t.Logf("broker-1 owns every shard %s after the kill", time.Since(asked).Round(time.Millisecond))

	waitFor(t, 4*time.Minute, "the bom converges on the surviving broker", func() (bool, string) {
		r, err := st.GetResource(ctx, "bom", "steer")
		if err != nil {
			return false, err.Error()
		}
		return r.Phase == resource.PhaseReady, string(r.Phase)
	})

	// An unknown member is refused by name; nothing changes.
	out.Reset()
	errb.Reset()
	require.NotEqual(t, 0, cli.Run(ctx, env, []string{"cluster", "drain", "broker-nope"}))
	require.Contains(t, errb.String(), `"broker-nope"`)

	_, err = fmt.Fprintln(c.stdin, "list")
	require.NoError(t, err)
	require.Contains(t, c.expect(t, "member: broker-2", 10*time.Second), "exited=0 (drained)")
	c.interrupt(t)
}
