package ts_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/workerproto/childcols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// TestTSSDK_ReadsTheGoWritersColumns holds the TypeScript SDK's reader of a
// rollup's columns to the Go one (workerproto/childcols): columns written
// by the Go Builder read, in TypeScript, as exactly the children the Go
// Summaries spell out (and the TS SDK reads from that legacy list), and
// every malformed shape is refused with the Go Check's message.
func TestTSSDK_ReadsTheGoWritersColumns(t *testing.T) {
	t.Parallel()
	build(t)
	root := uuid.MustParse("0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0")
	id := func(n byte) uuid.UUID { return uuid.UUID{15: n, 6: 0x40, 8: 0x80} }
	type child struct {
		n                 byte
		kind, name, phase string
		ok                bool
		status            string
		owner             uuid.UUID
	}
	// (kind, name) order, three kinds, an unhealthy child, owners nested two
	// deep and one owner listed after the child it owns.
	subtree := []child{
		{1, "account", "team-a", "Ready", true, `{"accountId":"a-1"}`, id(4)},
		{2, "account", "team-b", "Failed", false, `{"error":"quota"}`, root},
		{3, "route", "r-1", "Pending", true, ``, id(1)},
		{4, "vpc", "main", "Ready", true, `{"cidr":"10.0.0.0/16"}`, root},
		{5, "vpc", "spare", "Deleting", true, `{}`, root},
	}
	columns := func(withStatus bool) *workerv1.ChildColumns {
		b := childcols.New(root, len(subtree), withStatus)
		for _, c := range subtree {
			b.Add(id(c.n), c.kind, c.name, c.phase, c.ok, []byte(c.status), c.owner)
		}
		cols, err := b.Finish()
		require.NoError(t, err)
		return cols
	}
	task := func(r *workerv1.RollupRequest) *workerv1.StageTask {
		return &workerv1.StageTask{TaskId: "t", Stage: workerv1.Stage_STAGE_ROLLUP, Reaction: "rollup",
			Resource: &workerv1.Resource{Id: root.String(), Kind: "k", Version: "v1", Name: "bare", Generation: 1},
			Request:  &workerv1.StageTask_Rollup{Rollup: r}}
	}
	// handlerView is what a TS handler is given for the Go summaries.
	handlerView := func(sums []*workerv1.ChildSummary) any {
		out := make([]map[string]any, 0, len(sums))
		for _, s := range sums {
			m := map[string]any{"id": s.Id, "kind": s.Kind, "name": s.Name, "phase": s.Phase, "healthOk": s.HealthOk, "ownerId": s.OwnerId}
			if len(s.StatusJson) > 0 {
				var v any
				require.NoError(t, json.Unmarshal(s.StatusJson, &v))
				m["status"] = v
			}
			out = append(out, m)
		}
		return map[string]any{"children": out}
	}

	type tcase struct {
		reason string
		task   *workerv1.StageTask
		want   any
	}
	var cases []tcase
	for _, withStatus := range []bool{true, false} {
		cols := columns(withStatus)
		sums, err := childcols.Summaries(cols, root.String())
		require.NoError(t, err)
		cases = append(cases,
			tcase{"columns read as the Go summaries", task(&workerv1.RollupRequest{Compact: cols}), handlerView(sums)},
			tcase{"the legacy list reads as the same summaries", task(&workerv1.RollupRequest{Children: sums}), handlerView(sums)})
	}
	malformed := map[string]func(c *workerv1.ChildColumns){
		"ids short":            func(c *workerv1.ChildColumns) { c.Ids = c.Ids[1:] },
		"kinds long":           func(c *workerv1.ChildColumns) { c.Kinds = append(c.Kinds, 0) },
		"phases short":         func(c *workerv1.ChildColumns) { c.Phases = c.Phases[1:] },
		"owners short":         func(c *workerv1.ChildColumns) { c.Owners = c.Owners[1:] },
		"statuses partial":     func(c *workerv1.ChildColumns) { c.Statuses = c.Statuses[1:] },
		"kind out of range":    func(c *workerv1.ChildColumns) { c.Kinds[3] = uint32(len(c.KindNames)) },
		"phase out of range":   func(c *workerv1.ChildColumns) { c.Phases[0] = 99 },
		"owner itself":         func(c *workerv1.ChildColumns) { c.Owners[2] = 3 },
		"owner past the end":   func(c *workerv1.ChildColumns) { c.Owners[2] = uint32(len(c.Names)) + 1 },
		"unhealthy repeated":   func(c *workerv1.ChildColumns) { c.Unhealthy = []uint32{1, 1} },
		"unhealthy descending": func(c *workerv1.ChildColumns) { c.Unhealthy = []uint32{4, 2} },
		"unhealthy past end":   func(c *workerv1.ChildColumns) { c.Unhealthy = []uint32{uint32(len(c.Names))} },
	}
	for reason, mutate := range malformed {
		cols := columns(true)
		mutate(cols)
		err := childcols.Check(cols)
		require.Error(t, err, reason)
		cases = append(cases, tcase{reason, task(&workerv1.RollupRequest{Compact: cols}), map[string]any{"error": err.Error()}})
	}

	in := make([]string, 0, len(cases))
	for _, c := range cases {
		b, err := proto.Marshal(c.task)
		require.NoError(t, err)
		in = append(in, base64.StdEncoding.EncodeToString(b))
	}
	stdin, err := json.Marshal(in)
	require.NoError(t, err)
	cmd := exec.Command("node", "dist/test/readtasks.js")
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.Output()
	require.NoError(t, err)
	var got []any
	require.NoError(t, json.Unmarshal(out, &got))
	require.Len(t, got, len(cases))
	for i, c := range cases {
		// Round-trip the want through JSON so both sides hold the same types.
		b, err := json.Marshal(c.want)
		require.NoError(t, err)
		var want any
		require.NoError(t, json.Unmarshal(b, &want))
		if diff := cmp.Diff(want, got[i]); diff != "" {
			t.Errorf("%s: the TS reader differs from the Go one (-want +got):\n%s", c.reason, diff)
		}
	}
}
