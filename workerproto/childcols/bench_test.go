package childcols_test

import (
	"fmt"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/workerproto/childcols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// classicSubtree is the classic demo's composite: 1,000 leaves of three
// kinds, all Ready, each with a small status.
func classicSubtree(root uuid.UUID) []node {
	kinds := []string{"account", "route", "route", "vpc"}
	nodes := make([]node, 0, 1000)
	for i := range 1000 {
		nodes = append(nodes, node{id: uuid.New(), owner: root, kind: kinds[i%4], name: fmt.Sprintf("bench-00042-t%d-%d", i/4, i%4),
			phase: "Ready", healthOK: true, status: []byte(`{"team":"bench-00042-t1","vpc_id":"vpc-3f2a9c01d2"}`)})
	}
	return nodes
}

// BenchmarkRollupChildren is the per-rollup cost of the subtree on each
// side of the wire, per form: the broker building and marshalling it, the
// worker unmarshalling it and turning it into the handler's children. The
// list form is what every rollup cost before columns (children with their
// statuses); columns are measured with and without statuses (a rollup
// that reads childStatus, and one that does not, like the classic demo's).
//
//	go test ./workerproto/childcols -run '^$' -bench RollupChildren -benchmem
func BenchmarkRollupChildren(b *testing.B) {
	root := uuid.New()
	nodes := classicSubtree(root)
	type handlerChild struct {
		ID, Kind, Name, Phase string
		HealthOK              bool
		Status                []byte
		OwnerID               string
	}
	for _, form := range []string{"list", "columns+status", "columns"} {
		withStatus := form != "columns"
		build := func() *workerv1.RollupRequest {
			if form == "list" {
				req := &workerv1.RollupRequest{Children: make([]*workerv1.ChildSummary, 0, len(nodes))}
				ownerID := root.String()
				for _, n := range nodes {
					req.Children = append(req.Children, &workerv1.ChildSummary{Id: n.id.String(), Kind: n.kind, Name: n.name,
						Phase: n.phase, HealthOk: n.healthOK, StatusJson: n.status, OwnerId: ownerID})
				}
				return req
			}
			cb := childcols.New(root, 0, withStatus)
			for _, n := range nodes {
				cb.Add(n.id, n.kind, n.name, n.phase, n.healthOK, n.status, n.owner)
			}
			cols, err := cb.Finish()
			if err != nil {
				b.Fatal(err)
			}
			return &workerv1.RollupRequest{Compact: cols}
		}
		wire, err := proto.Marshal(build())
		if err != nil {
			b.Fatal(err)
		}
		b.Run(form+"/broker", func(b *testing.B) {
			for b.Loop() {
				if _, err := proto.Marshal(build()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(wire)), "wire-bytes")
		})
		b.Run(form+"/worker", func(b *testing.B) {
			for b.Loop() {
				req := &workerv1.RollupRequest{}
				if err := proto.Unmarshal(wire, req); err != nil {
					b.Fatal(err)
				}
				var out []handlerChild
				if cols := req.GetCompact(); cols != nil {
					out = make([]handlerChild, 0, childcols.Len(cols))
					if err := childcols.Walk(cols, root.String(), func(c childcols.Child) {
						out = append(out, handlerChild(c))
					}); err != nil {
						b.Fatal(err)
					}
				} else {
					for _, c := range req.GetChildren() {
						out = append(out, handlerChild{ID: c.GetId(), Kind: c.GetKind(), Name: c.GetName(), Phase: c.GetPhase(),
							HealthOK: c.GetHealthOk(), Status: c.GetStatusJson(), OwnerID: c.GetOwnerId()})
					}
				}
				if len(out) != len(nodes) {
					b.Fatalf("%d children, want %d", len(out), len(nodes))
				}
			}
		})
	}
}
