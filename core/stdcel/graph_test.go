package stdcel_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/stdcel"
	"github.com/converge-run/converge/core/worker"
)

func compile(t *testing.T, doc string) (*stdcel.Plan, error) {
	t.Helper()
	g, err := stdcel.ParseGraph(json.RawMessage(doc))
	require.NoError(t, err)
	return stdcel.Compile(g)
}

func TestCompile_InfersEdgesAndValueFlowsFromReferences(t *testing.T) {
	t.Parallel()
	p, err := compile(t, `{"resources":[
	  {"id":"app","kind":"app","spec":{"net":{"subnet":"${subnet.status.subnet_id}"},"zones":["${vpc.status.zones[0]}"],
	     "title":"app of ${schema.name} in ${vpc.spec.region}","replicas":"${schema.spec.replicas * 2.0}"}},
	  {"id":"subnet","kind":"subnet","name":"${vpc.name}-sub","spec":{"vpc_id":"${vpc.status.vpc_id}","cidr":"${schema.spec.cidr}"}},
	  {"id":"vpc","kind":"vpc","labels":{"team":"${schema.labels.team}"},"spec":{"region":"${schema.spec.region}","literal":"$${not.an.expr}"}}
	]}`)
	require.NoError(t, err)
	children, edges, err := p.Children(context.Background(), stdcel.Composite{Name: "web", Labels: map[string]string{"team": "red"},
		Spec: json.RawMessage(`{"cidr":"10.0.0.0/16","region":"eu-west-1","replicas":2}`)})
	require.NoError(t, err)
	require.Len(t, children, 3)
	require.Equal(t, []string{"web-vpc", "web-vpc-sub", "web-app"}, []string{children[0].Name, children[1].Name, children[2].Name},
		"children come in dependency order")
	require.JSONEq(t, `{"region":"eu-west-1","literal":"${not.an.expr}"}`, string(children[0].Spec))
	require.Equal(t, "red", children[0].Labels["team"])
	require.Equal(t, "web", children[0].Labels["stdcel"])
	require.JSONEq(t, `{"cidr":"10.0.0.0/16"}`, string(children[1].Spec), "a flowed field is left for the core to set")
	require.JSONEq(t, `{"net":{},"zones":[null],"title":"app of web in eu-west-1","replicas":4}`, string(children[2].Spec))
	require.Equal(t, worker.Edge{Dependent: worker.Ref{Kind: "subnet", Name: "web-vpc-sub"}, Dependency: worker.Ref{Kind: "vpc", Name: "web-vpc"},
		ValueFlows: []worker.ValueFlow{{SrcField: "/vpc_id", DepField: "/vpc_id"}}}, edges[0], "subnet's name and vpc_id read vpc")
	require.Len(t, edges, 3)
	require.ElementsMatch(t, []worker.Edge{
		{Dependent: worker.Ref{Kind: "app", Name: "web-app"}, Dependency: worker.Ref{Kind: "subnet", Name: "web-vpc-sub"},
			ValueFlows: []worker.ValueFlow{{SrcField: "/subnet_id", DepField: "/net/subnet"}}},
		{Dependent: worker.Ref{Kind: "app", Name: "web-app"}, Dependency: worker.Ref{Kind: "vpc", Name: "web-vpc"},
			ValueFlows: []worker.ValueFlow{{SrcField: "/zones/0", DepField: "/zones/0"}}},
	}, edges[1:])
}

func TestCompile_RefusesBadGraphs(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ doc, want string }{
		"unknown reference": {`{"resources":[{"id":"subnet","kind":"subnet","spec":{"vpc_id":"${vpcx.status.id}"}}]}`,
			"undeclared reference to 'vpcx'"},
		"known names listed": {`{"resources":[{"id":"subnet","kind":"subnet","spec":{"vpc_id":"${vpcx.status.id}"}}]}`,
			"known references: schema, subnet"},
		"cycle": {`{"resources":[{"id":"a","kind":"k","spec":{"x":"${b.status.x}"}},{"id":"b","kind":"k","spec":{"y":"${c.status.y}"}},
			{"id":"c","kind":"k","spec":{"z":"${a.status.z}"}}]}`, "the resources form a cycle: a → b → c → a"},
		"self": {`{"resources":[{"id":"a","kind":"k","spec":{"x":"${a.status.x}"}}]}`, "cannot read its own status"},
		"depends_on cycle": {`{"resources":[{"id":"a","kind":"k","depends_on":["b"]},{"id":"b","kind":"k","spec":{"v":"${a.spec}"}}]}`,
			"cycle: a → b → a"},
		"computing over status": {`{"resources":[{"id":"a","kind":"k"},{"id":"b","kind":"k","spec":{"x":"${a.status.n + 1}"}}]}`,
			"a.status is known only after a converges"},
		"status inside a string": {`{"resources":[{"id":"a","kind":"k"},{"id":"b","kind":"k","spec":{"x":"arn:${a.status.id}"}}]}`,
			"must be the whole value"},
		"status in a name": {`{"resources":[{"id":"a","kind":"k"},{"id":"b","kind":"k","name":"${a.status.id}"}]}`,
			"it may flow into a spec, not into name"},
		"unknown field": {`{"resources":[{"id":"a","kind":"k"},{"id":"b","kind":"k","spec":{"x":"${a.metadata}"}}]}`,
			"a.metadata: a resource has kind, name, labels, spec and status"},
		"unknown depends_on": {`{"resources":[{"id":"a","kind":"k","depends_on":["zz"]}]}`, `depends_on: unknown resource "zz"`},
		"bad id":             {`{"resources":[{"id":"my-vpc","kind":"k"}]}`, "must be a lower-case identifier"},
		"reserved id":        {`{"resources":[{"id":"int","kind":"k"}]}`, "not a CEL reserved word"},
		"duplicate id":       {`{"resources":[{"id":"a","kind":"k"},{"id":"a","kind":"k"}]}`, `id "a" is used twice`},
		"unterminated":       {`{"resources":[{"id":"a","kind":"k","spec":{"x":"${schema.spec"}}]}`, "unterminated expression"},
		"syntax":             {`{"resources":[{"id":"a","kind":"k","spec":{"x":"${schema.spec.}"}}]}`, "resources[0] (a): spec.x: ${schema.spec.}"},
		"no resources":       {`{"resources":[]}`, "no resources"},
		"no kind":            {`{"resources":[{"id":"a"}]}`, "kind is empty"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := compile(t, tc.doc)
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := stdcel.ParseGraph(json.RawMessage(`{"resource":[]}`))
	require.ErrorContains(t, err, `unknown field "resource"`)
}

func TestPlan_EvaluationErrorsNameTheField(t *testing.T) {
	t.Parallel()
	p, err := compile(t, `{"resources":[{"id":"a","kind":"k","spec":{"x":{"y":"${schema.spec.missing}"}}}]}`)
	require.NoError(t, err)
	_, _, err = p.Children(context.Background(), stdcel.Composite{Name: "r", Spec: json.RawMessage(`{}`)})
	require.ErrorContains(t, err, "resource a: spec.x: y: ${schema.spec.missing}: no such key: missing")
}

// TestPlan_LargeValuesAreRefusedBeforeTheyAreEncoded: an expression cheap
// within the cost limit whose value is large as JSON (a list repeating one
// long string of the spec) is refused naming MaxResultBytes and where,
// before the child's spec is encoded; in the status projection the field
// fails alone. It was encoded whole (100 MB here, unbounded with the
// list's length: a composite's spec could run the worker out of memory).
func TestPlan_LargeValuesAreRefusedBeforeTheyAreEncoded(t *testing.T) {
	t.Parallel()
	spec, err := json.Marshal(map[string]any{"l": make([]int, 100), "s": strings.Repeat("x", 1<<20)})
	require.NoError(t, err)
	comp := stdcel.Composite{Name: "r", Spec: spec}
	p, err := compile(t, `{"resources":[{"id":"a","kind":"k","spec":{"x":"${schema.spec.l.map(i, schema.spec.s)}"}}],
		"status":{"big":"${schema.spec.l.map(i, schema.spec.s)}","small":"${a.name}"}}`)
	require.NoError(t, err)
	_, _, err = p.Children(context.Background(), comp)
	require.ErrorContains(t, err, "resource a: spec.x: ${schema.spec.l.map(i, schema.spec.s)}: the values evaluated would be more than")
	require.ErrorContains(t, err, "(MaxResultBytes)")

	res, err := p.Status(context.Background(), comp, map[string]stdcel.Observed{}, map[string]string{"a": "r-a"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"small": "r-a"}, res.Fields)
	require.Len(t, res.Failed, 1)
	require.Equal(t, "big", res.Failed[0].Field)
	require.ErrorContains(t, res.Failed[0].Err, "(MaxResultBytes)")

	small, err := json.Marshal(map[string]any{"l": make([]int, 60), "s": strings.Repeat("x", 1<<20)})
	require.NoError(t, err)
	children, _, err := p.Children(context.Background(), stdcel.Composite{Name: "r", Spec: small})
	require.NoError(t, err, "60 MiB is within the limit")
	require.Greater(t, len(children[0].Spec), 60<<20)
}

// TestPlan_ErrorsAreDeterministic: with more than one failing field (or
// label, or graph error), the one named is always the same, the first in
// name order: compiling and evaluating walked Go maps, so the message a
// resource failed with changed from one run to the next.
func TestPlan_ErrorsAreDeterministic(t *testing.T) {
	t.Parallel()
	p, err := compile(t, `{"resources":[{"id":"a","kind":"k",
		"labels":{"l1":"${schema.spec.m1}","l2":"${schema.spec.m2}"},
		"spec":{"f1":"${schema.spec.m3}","f2":"${schema.spec.m4}","f3":"${schema.spec.m5}"}}]}`)
	require.NoError(t, err)
	noLabels, err := compile(t, `{"resources":[{"id":"a","kind":"k",
		"spec":{"f1":"${schema.spec.m3}","f2":"${schema.spec.m4}","f3":"${schema.spec.m5}"}}]}`)
	require.NoError(t, err)
	for range 30 {
		_, _, err := p.Children(context.Background(), stdcel.Composite{Name: "r", Spec: json.RawMessage(`{}`)})
		require.ErrorContains(t, err, "labels.l1: ${schema.spec.m1}")
		_, _, err = noLabels.Children(context.Background(), stdcel.Composite{Name: "r", Spec: json.RawMessage(`{}`)})
		require.ErrorContains(t, err, "spec.f1: ${schema.spec.m3}")
		_, err = compile(t, `{"resources":[{"id":"a","kind":"k","spec":{"f1":"${nope1}","f2":"${nope2}","f3":"${nope3}"}}]}`)
		require.ErrorContains(t, err, "spec.f1: ${nope1}")
	}
}

// TestCompile_ComprehensionVariablesAreNotResources: a macro's variable
// named like a resource id is that variable where it is bound, so it adds
// no dependency and no refusal; the same name outside the macro is still
// the resource.
func TestCompile_ComprehensionVariablesAreNotResources(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"no false cycle": `{"resources":[
		  {"id":"vpc","kind":"vpc","spec":{"x":"${subnet.spec.cidr}"}},
		  {"id":"subnet","kind":"subnet","spec":{"cidr":"10.0.0.0/8","tags":"${schema.spec.tags.map(vpc, vpc + '-x')}"}}]}`,
		"no false self reference": `{"resources":[
		  {"id":"item","kind":"k","spec":{"names":"${schema.spec.items.map(item, item.name)}"}}]}`,
		"no false status refusal": `{"resources":[{"id":"a","kind":"k"},
		  {"id":"b","kind":"k","spec":{"n":"${schema.spec.xs.filter(a, a.status == 'up').size()}"}}]}`,
		"nested macros": `{"resources":[{"id":"k","kind":"k"},
		  {"id":"b","kind":"k","spec":{"n":"${schema.spec.xs.map(k, schema.spec.ys.filter(b, b == k))}"}}]}`,
	} {
		_, err := compile(t, doc)
		require.NoError(t, err, name)
	}
	p, err := compile(t, `{"resources":[{"id":"vpc","kind":"vpc","spec":{"r":"${schema.spec.region}"}},
	  {"id":"subnet","kind":"subnet","spec":{"tags":"${[vpc.spec.r].map(vpc, vpc + '-x')}"}}]}`)
	require.NoError(t, err)
	_, edges, err := p.Children(context.Background(), stdcel.Composite{Name: "web", Spec: json.RawMessage(`{"region":"eu"}`)})
	require.NoError(t, err)
	require.Len(t, edges, 1, "vpc outside the macro (its range) is still the resource")
	_, err = compile(t, `{"resources":[{"id":"a","kind":"k"},{"id":"b","kind":"k","spec":{"n":"${[1].map(x, a.status.n + x)}"}}]}`)
	require.ErrorContains(t, err, "a.status is known only after a converges", "a resource read inside a macro body is still refused")
}

// TestCompile_TemplatesCannotSetTheOwnershipLabels: stdcel and stdcel-id
// name the composite and the resource on every child.
func TestCompile_TemplatesCannotSetTheOwnershipLabels(t *testing.T) {
	t.Parallel()
	for _, label := range []string{"stdcel", "stdcel-id"} {
		_, err := compile(t, `{"resources":[{"id":"a","kind":"k","labels":{"`+label+`":"other"}}]}`)
		require.ErrorContains(t, err, "resources[0] (a): labels."+label+": stdcel sets it on every child")
	}
}
