package stdcel_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/converge-run/converge/core/stdcel"
)

// FuzzGraph: any providerconfig spec and composite spec compile and
// instantiate, or fail with an error; never a panic.
func FuzzGraph(f *testing.F) {
	f.Add(`{"resources":[{"id":"a","kind":"k","spec":{"x":"${schema.spec.n}","y":"${b.status.y}"}},{"id":"b","kind":"k","name":"${schema.name}-${a.name}"}]}`, `{"n":1}`)
	f.Add(`{"resources":[{"id":"a","kind":"k","spec":{"x":"${{'a': '}'}['a']}","z":["${schema.spec}", "$${x}"]}}],"status":{"s":"${a.status.q}"}}`, `{}`)
	f.Add(`{"resources":[{"id":"a","kind":"k","spec":{"x":"${a.status[0]}","y":"${0.0/0.0}"}}]}`, `null`)
	f.Fuzz(func(_ *testing.T, graph, spec string) {
		g, err := stdcel.ParseGraph(json.RawMessage(graph))
		if err != nil {
			return
		}
		p, err := stdcel.Compile(g)
		if err != nil {
			return
		}
		_, _, _ = p.Children(context.Background(), stdcel.Composite{Name: "r", Spec: json.RawMessage(spec)})
	})
}
