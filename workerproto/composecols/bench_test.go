package composecols_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/converge-run/converge/workerproto/composecols"
	workerv1 "github.com/converge-run/converge/workerproto/gen/converge/worker/v1"
)

// classicComposition is the classic demo's bom of 250 teams as its
// composer emits it: per team an account, a VPC and two routes sharing the
// team's labels map, the VPC after the account and the routes after the
// VPC, each with one value flow.
func classicComposition() ([]child, []edge) {
	var children []child
	var edges []edge
	spec := func(v any) []byte { b, _ := json.Marshal(v); return b }
	for t := range 250 {
		team := fmt.Sprintf("bench-00042-t%d", t)
		labels := map[string]string{"bom": "bench-00042", "team": fmt.Sprintf("t%d", t)}
		acct, vpc := team+"-account", team+"-vpc"
		children = append(children,
			child{kind: "account", name: acct, labels: labels, spec: spec(map[string]string{"team": team, "region": "eu-west-1"})},
			child{kind: "vpc", name: vpc, labels: labels, spec: spec(map[string]string{"team": team, "region": "eu-west-1", "cidr": fmt.Sprintf("10.%d.%d.0/24", t/256, t%256)})})
		edges = append(edges, edge{dependent: composecols.Ref{Kind: "vpc", Name: vpc}, dependency: composecols.Ref{Kind: "account", Name: acct},
			flows: []composecols.Flow{{Src: "/account_id", Dep: "/account_id"}}})
		for r := range 2 {
			rt := fmt.Sprintf("%s-route-%d", team, r)
			children = append(children, child{kind: "route", name: rt, labels: labels, spec: spec(map[string]string{"team": team, "destination": fmt.Sprintf("192.168.%d.0/24", r)})})
			edges = append(edges, edge{dependent: composecols.Ref{Kind: "route", Name: rt}, dependency: composecols.Ref{Kind: "vpc", Name: vpc},
				flows: []composecols.Flow{{Src: "/vpc_id", Dep: "/vpc_id"}}})
		}
	}
	return children, edges
}

// BenchmarkComposition is the per-compose cost of a 1,000-child
// composition on each side of the wire, per form: the worker building and
// marshalling it, and the broker unmarshalling it and walking every child
// and edge (what it reads into the store's terms). Lists are what every
// compose cost before columns.
//
//	go test ./workerproto/composecols -run '^$' -bench Composition -benchmem
func BenchmarkComposition(b *testing.B) {
	children, edges := classicComposition()
	for _, form := range []string{"lists", "columns"} {
		build := func() *workerv1.Outcome {
			if form == "lists" {
				c, e := lists(children, edges)
				return &workerv1.Outcome{Children: c, Edges: e}
			}
			bl := composecols.NewBuilder(len(children), len(edges))
			for _, c := range children {
				bl.Child(c.kind, c.version, c.name, c.labels, c.spec, c.configRef)
			}
			for _, e := range edges {
				bl.Edge(e.dependent, e.dependency, e.flows)
			}
			cols, ok := bl.Finish()
			if !ok {
				b.Fatal("does not fit columns")
			}
			return &workerv1.Outcome{Composition: cols}
		}
		wire, err := proto.Marshal(build())
		if err != nil {
			b.Fatal(err)
		}
		b.Run(form+"/worker", func(b *testing.B) {
			for b.Loop() {
				if _, err := proto.Marshal(build()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(wire)), "wire-bytes")
		})
		b.Run(form+"/broker", func(b *testing.B) {
			for b.Loop() {
				out := &workerv1.Outcome{}
				if err := proto.Unmarshal(wire, out); err != nil {
					b.Fatal(err)
				}
				n := 0
				if cols := out.GetComposition(); cols != nil {
					_ = composecols.FlowSets(cols)
					if err := composecols.Walk(cols, func(int, composecols.Child) { n++ }, func(int, composecols.Edge) { n++ }); err != nil {
						b.Fatal(err)
					}
				} else {
					for _, c := range out.GetChildren() {
						_, _ = c.GetName(), c.GetLabels()
						n++
					}
					for _, e := range out.GetEdges() {
						_ = e.GetValueFlows()
						n++
					}
				}
				if n != len(children)+len(edges) {
					b.Fatalf("read %d, want %d", n, len(children)+len(edges))
				}
			}
		})
	}
}
