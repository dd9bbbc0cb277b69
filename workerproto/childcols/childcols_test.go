package childcols_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/workerproto/childcols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

type node struct {
	id, owner  uuid.UUID
	kind, name string
	phase      string
	healthOK   bool
	status     []byte
}

// subtree is a root with two kinds, a nested composite whose children come
// before it in (kind, name) order, an unhealthy child and phases of
// several kinds.
func subtree(root uuid.UUID) []node {
	mid := uuid.New()
	return []node{
		{id: uuid.New(), owner: root, kind: "account", name: "a", phase: "Ready", healthOK: true, status: []byte(`{"account_id":"1"}`)},
		{id: uuid.New(), owner: mid, kind: "account", name: "b", phase: "Failed", status: []byte(`{}`)},
		{id: uuid.New(), owner: mid, kind: "route", name: "r", phase: "Ready", healthOK: true},
		{id: mid, owner: root, kind: "team", name: "t", phase: "Degraded", healthOK: false, status: []byte(`{"n":2}`)},
		{id: uuid.New(), owner: root, kind: "vpc", name: "v", phase: "Ready", healthOK: true, status: []byte(`{"vpc_id":"v"}`)},
	}
}

func build(t *testing.T, root uuid.UUID, nodes []node, withStatus bool) *workerv1.ChildColumns {
	t.Helper()
	b := childcols.New(root, 0, withStatus)
	for _, n := range nodes {
		b.Add(n.id, n.kind, n.name, n.phase, n.healthOK, n.status, n.owner)
	}
	require.Equal(t, len(nodes), b.Len())
	cols, err := b.Finish()
	require.NoError(t, err)
	return cols
}

// The columns read back as the subtree that went in, child by child, with
// and without statuses, also after a trip over the wire.
func TestWalk_ReadsBackWhatWasAdded(t *testing.T) {
	t.Parallel()
	for _, withStatus := range []bool{true, false} {
		t.Run(fmt.Sprintf("status=%v", withStatus), func(t *testing.T) {
			t.Parallel()
			root := uuid.New()
			nodes := subtree(root)
			b, err := proto.Marshal(build(t, root, nodes, withStatus))
			require.NoError(t, err)
			cols := &workerv1.ChildColumns{}
			require.NoError(t, proto.Unmarshal(b, cols))

			var got []childcols.Child
			require.NoError(t, childcols.Walk(cols, root.String(), func(c childcols.Child) { got = append(got, c) }))
			require.Len(t, got, len(nodes))
			for i, n := range nodes {
				want := childcols.Child{ID: n.id.String(), Kind: n.kind, Name: n.name, Phase: n.phase,
					HealthOK: n.healthOK, OwnerID: n.owner.String()}
				if withStatus && len(n.status) > 0 {
					want.Status = n.status
				}
				require.Equal(t, want, got[i], n.name)
			}
			require.Equal(t, []string{"account", "route", "team", "vpc"}, cols.GetKindNames(), "each kind spelled once")
			require.Equal(t, []string{"Ready", "Failed", "Degraded"}, cols.GetPhaseNames(), "each phase spelled once")
			require.Equal(t, []uint32{1, 3}, cols.GetUnhealthy())
		})
	}
}

// Summaries spells the columns out as the list a worker without columns
// gets: the same children, field for field.
func TestSummaries_MatchTheColumns(t *testing.T) {
	t.Parallel()
	root := uuid.New()
	nodes := subtree(root)
	list, err := childcols.Summaries(build(t, root, nodes, true), root.String())
	require.NoError(t, err)
	require.Len(t, list, len(nodes))
	for i, n := range nodes {
		c := list[i]
		require.Equal(t, []string{n.id.String(), n.kind, n.name, n.phase, n.owner.String()},
			[]string{c.GetId(), c.GetKind(), c.GetName(), c.GetPhase(), c.GetOwnerId()}, n.name)
		require.Equal(t, n.healthOK, c.GetHealthOk(), n.name)
		require.Equal(t, string(n.status), string(c.GetStatusJson()), n.name)
	}
}

// The columns are a fraction of the list's size on the wire for a
// composite of leaves (the classic demo's shape).
func TestColumns_AreSmallerThanTheList(t *testing.T) {
	t.Parallel()
	root := uuid.New()
	var nodes []node
	for i := range 1000 {
		nodes = append(nodes, node{id: uuid.New(), owner: root, kind: []string{"account", "route", "vpc"}[i%3],
			name: fmt.Sprintf("bom-%d-t%d", i, i/3), phase: "Ready", healthOK: true})
	}
	cols := build(t, root, nodes, false)
	list, err := childcols.Summaries(cols, root.String())
	require.NoError(t, err)
	colBytes, listBytes := proto.Size(cols), proto.Size(&workerv1.RollupRequest{Children: list})
	require.Less(t, colBytes*2, listBytes, "columns %d bytes, list %d", colBytes, listBytes)
}

// An owner outside the subtree means the walk did not read a whole
// subtree: Finish refuses, naming the child.
func TestFinish_RefusesAnOwnerOutsideTheSubtree(t *testing.T) {
	t.Parallel()
	root, stray := uuid.New(), uuid.New()
	b := childcols.New(root, 2, false)
	b.Add(uuid.New(), "vpc", "a", "Ready", true, nil, root)
	child := uuid.New()
	b.Add(child, "vpc", "b", "Ready", true, nil, stray)
	_, err := b.Finish()
	require.ErrorContains(t, err, child.String())
	require.ErrorContains(t, err, stray.String())
}

// Reset starts over: a retried read does not append to the first one's
// children.
func TestReset_StartsOver(t *testing.T) {
	t.Parallel()
	root := uuid.New()
	b := childcols.New(root, 0, true)
	for _, n := range subtree(root) {
		b.Add(n.id, n.kind, n.name, n.phase, n.healthOK, n.status, n.owner)
	}
	b.Reset()
	only := uuid.New()
	b.Add(only, "vpc", "v", "Ready", true, []byte(`{}`), root)
	cols, err := b.Finish()
	require.NoError(t, err)
	require.Equal(t, 1, childcols.Len(cols))
	require.Equal(t, []string{"vpc"}, cols.GetKindNames())
	require.Empty(t, cols.GetUnhealthy())
	require.Equal(t, only[:], cols.GetIds())
}

// Every malformed shape is refused before any child is handed out, naming
// the column.
func TestWalk_RefusesMalformedColumns(t *testing.T) {
	t.Parallel()
	root := uuid.New()
	good := func() *workerv1.ChildColumns { return build(t, root, subtree(root), true) }
	cases := map[string]struct {
		mangle func(c *workerv1.ChildColumns)
		want   string
	}{
		"short ids":         {func(c *workerv1.ChildColumns) { c.Ids = c.Ids[:len(c.Ids)-1] }, "ids"},
		"missing kind":      {func(c *workerv1.ChildColumns) { c.Kinds = c.Kinds[1:] }, "kinds"},
		"missing phase":     {func(c *workerv1.ChildColumns) { c.Phases = c.Phases[1:] }, "phases"},
		"missing owner":     {func(c *workerv1.ChildColumns) { c.Owners = c.Owners[1:] }, "owners"},
		"some statuses":     {func(c *workerv1.ChildColumns) { c.Statuses = c.Statuses[1:] }, "statuses"},
		"kind out of range": {func(c *workerv1.ChildColumns) { c.Kinds[2] = 9 }, "kind 9"},
		"phase past end":    {func(c *workerv1.ChildColumns) { c.Phases[0] = uint32(len(c.PhaseNames)) }, "phase"},
		"owner past end":    {func(c *workerv1.ChildColumns) { c.Owners[0] = 6 }, "owner 6"},
		"owns itself":       {func(c *workerv1.ChildColumns) { c.Owners[1] = 2 }, "owner 2"},
		"unhealthy order":   {func(c *workerv1.ChildColumns) { c.Unhealthy = []uint32{3, 1} }, "unhealthy"},
		"unhealthy twice":   {func(c *workerv1.ChildColumns) { c.Unhealthy = []uint32{1, 1} }, "unhealthy"},
		"unhealthy past":    {func(c *workerv1.ChildColumns) { c.Unhealthy = []uint32{5} }, "unhealthy"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := good()
			require.NoError(t, childcols.Check(c))
			tc.mangle(c)
			called := false
			err := childcols.Walk(c, root.String(), func(childcols.Child) { called = true })
			require.ErrorContains(t, err, tc.want)
			require.False(t, called)
			_, err = childcols.Summaries(c, root.String())
			require.Error(t, err)
		})
	}
}

// Whatever bytes arrive, reading them never panics, and columns that pass
// the check yield exactly one child per name.
func FuzzWalk(f *testing.F) {
	root := uuid.New()
	for _, withStatus := range []bool{true, false} {
		b := childcols.New(root, 0, withStatus)
		for _, n := range subtree(root) {
			b.Add(n.id, n.kind, n.name, n.phase, n.healthOK, n.status, n.owner)
		}
		cols, err := b.Finish()
		if err != nil {
			f.Fatal(err)
		}
		wire, err := proto.Marshal(cols)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, wire []byte) {
		cols := &workerv1.ChildColumns{}
		if proto.Unmarshal(wire, cols) != nil {
			return
		}
		n := 0
		err := childcols.Walk(cols, root.String(), func(childcols.Child) { n++ })
		if err == nil && n != childcols.Len(cols) {
			t.Fatalf("walked %d children of %d", n, childcols.Len(cols))
		}
		if err != nil && n != 0 {
			t.Fatalf("refused after handing out %d children: %v", n, err)
		}
	})
}
